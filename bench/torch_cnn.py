#!/usr/bin/env python3
"""The Fashion-MNIST CNN in plain PyTorch: what a user would run instead of dtrain's "cnn".

Same architecture as dtrain's cnn model with channels [32, 64] and fc 1024: two blocks of
(5x5 conv, padding 2, ReLU, 2x2 max-pool), then Linear(64*7*7, 1024), ReLU, Linear(1024, 10).
Batch 256, AdamW (lr 1e-3), fp32, one epoch over Fashion-MNIST-sized random data
(60000 x 1 x 28 x 28, 10 classes). Two ways to feed it (--mode):

  loader  torch.utils.data.DataLoader, shuffle, num_workers=4, pin_memory, non-blocking copies
  gpu     all data on the GPU already; batches are slices of a per-epoch permutation

The first `--warmup` steps are not timed. Prints one JSON line per mode:
{"case": "cnn", "mode": ..., "steps_per_s": ..., "images_per_s": ..., ...}. Default: loader.

  python3 bench/torch_cnn.py
  python3 bench/torch_cnn.py --mode all
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

from _common import batches, device_name, time_epoch

MODES = ["loader", "gpu"]


class Cnn(nn.Module):
    def __init__(self, channels=(32, 64), fc=1024, classes=10, in_shape=(1, 28, 28)):
        super().__init__()
        c, h, w = in_shape
        self.convs = nn.ModuleList()
        for out in channels:
            self.convs.append(nn.Conv2d(c, out, 5, padding=2))
            c, h, w = out, h // 2, w // 2
        self.fc = nn.Linear(c * h * w, fc)
        self.head = nn.Linear(fc, classes)

    def forward(self, x):
        for conv in self.convs:
            x = F.max_pool2d(F.relu(conv(x)), 2)
        return self.head(F.relu(self.fc(x.flatten(1))))


def run(mode, args, dev):
    torch.manual_seed(0)
    x = torch.randn(args.samples, 1, 28, 28)
    y = torch.randint(0, 10, (args.samples,))
    model = Cnn().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(xb, yb):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    feed = batches(x, y, args.batch, dev, preloaded=mode == "gpu", workers=args.workers)
    timed, elapsed, loss = time_epoch(feed, step, args.warmup, dev, args.max_steps)
    return {
        "case": "cnn",
        "mode": mode,
        "steps_per_s": round(timed / elapsed, 1),
        "images_per_s": round(timed * args.batch / elapsed, 1),
        "steps": timed, "batch": args.batch,
        "workers": args.workers if mode == "loader" else 0,
        "final_loss": round(loss.item(), 4),
        "device": device_name(dev),
        "torch": torch.__version__,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=MODES + ["all"], default="loader")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=0, help="stop early (0: one full epoch)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = torch.device(args.device)
    for mode in (MODES if args.mode == "all" else [args.mode]):
        print(json.dumps(run(mode, args, dev)), flush=True)


if __name__ == "__main__":
    main()
