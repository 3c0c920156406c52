#!/usr/bin/env python3
"""The smallest training step in plain PyTorch: framework overhead, not arithmetic.

Linear(10, 1), batch 128, Adam (lr 0.01), MSE, on 256,000 synthetic regression samples
(y = x.w + b + noise), one epoch of 2000 steps. Three ways to feed it (--mode):

  workers4  torch.utils.data.DataLoader, num_workers=4, pin_memory, non-blocking copies
  workers0  the same DataLoader with num_workers=0
  gpu       all data on the GPU already; batches are slices of a per-epoch permutation

The first `--warmup` steps (worker start-up included) are not timed. Prints one JSON line per
mode: {"case": "tiny", "mode": ..., "steps_per_s": ..., ...}. Default: all three modes, then a
last line with all of them: {"case": "tiny", "mode": "all", "steps_per_s_workers4": ...,
"steps_per_s_workers0": ..., "steps_per_s_gpu": ..., "steps_per_s_best": ...}.

--profile PATH: after each mode's epoch, a trace of --profile-steps more steps from a new
loader (warmed up by --warmup steps first); with several modes, one trace per mode
(tiny.json -> tiny.workers4.json, ...).

  python3 bench/torch_tiny.py
  python3 bench/torch_tiny.py --mode workers4
  python3 bench/torch_tiny.py --mode gpu --profile tiny_gpu.json
"""
import argparse
import json

import torch
import torch.nn.functional as F

from _common import (add_profile_args, batches, device_name, endless, profile_steps,
                     tagged_path, time_epoch)

MODES = ["workers4", "workers0", "gpu"]


def make_data(n, features, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, 1, generator=g)
    b = torch.randn(1, generator=g)
    x = torch.randn(n, features, generator=g)
    y = x @ w + b + 0.01 * torch.randn(n, 1, generator=g)
    return x, y


def run(mode, args, dev, profile=None):
    torch.manual_seed(0)
    x, y = make_data(args.batch * args.steps, 10)
    model = torch.nn.Linear(10, 1).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(xb, yb):
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    def epoch():
        return batches(x, y, args.batch, dev, preloaded=mode == "gpu",
                       workers=4 if mode == "workers4" else 0)

    timed, elapsed, loss = time_epoch(epoch(), step, args.warmup, dev)
    result = {
        "case": "tiny",
        "mode": mode,
        "steps_per_s": round(timed / elapsed, 1),
        "samples_per_s": round(timed * args.batch / elapsed, 1),
        "steps": timed, "batch": args.batch, "final_loss": round(loss.item(), 6),
        "device": device_name(dev),
        "torch": torch.__version__,
    }
    if profile:
        # The loader's batch fetch is part of the step, as in the timed epoch.
        feed = endless(epoch)
        for _ in range(args.warmup):
            step(*next(feed))
        result["profile"] = profile_steps(lambda: step(*next(feed)), args.profile_steps, dev,
                                          profile)
        feed.close()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=MODES + ["all"], default="all")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2000,
                    help="steps in the epoch (timed after the warmup)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_profile_args(ap)
    args = ap.parse_args()
    dev = torch.device(args.device)
    modes = MODES if args.mode == "all" else [args.mode]
    results = []
    for mode in modes:
        profile = args.profile and (tagged_path(args.profile, mode) if len(modes) > 1
                                    else args.profile)
        results.append(run(mode, args, dev, profile))
        print(json.dumps(results[-1]), flush=True)
    if len(results) > 1:
        # Last line: all modes together (bench/summarize.py reads the last JSON line).
        summary = {"case": "tiny", "mode": "all"}
        for r in results:
            summary["steps_per_s_" + r["mode"]] = r["steps_per_s"]
        summary["steps_per_s_best"] = max(r["steps_per_s"] for r in results)
        if args.profile:
            summary["profile"] = {r["mode"]: r["profile"] for r in results}
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
