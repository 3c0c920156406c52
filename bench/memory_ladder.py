#!/usr/bin/env python3
"""The memory ladder on one GPU: what activation checkpointing and the sharded optimizer buy.

Runs dtrain (no PyTorch needed) and reads each run's summary record from metrics.jsonl:

  A. GPT-2 124M at B=64 and GPT-2 medium (24 layers x 1024) at B=32, T=1024, bf16: peak memory
     and steady tokens/s with train.activation_checkpointing off and blocks.
  B. The largest GPT (24 layers, width from --widths) that trains at run.gpu_memory_fraction
     --fraction with B=8, on each rung: the whole batch at once (no out-of-memory retry), micro-
     batches (train.micro_batch: auto), + activation checkpointing, + the optimizer state sharded
     over 4 ranks sharing the GPU (each capped at the same fraction, as 4 such GPUs would be), +
     the gradients sharded too (dist.shard_optimizer=gradients, ZeRO-2).
  C. GPT-2 124M's peak memory per rank on 1, 2 and 4 ranks sharing the GPU (NCCL over loopback:
     for memory, not for speed), with dist.shard_optimizer false, true (the optimizer state
     sharded) and gradients (the gradients too).

    python3 bench/memory_ladder.py --bin build-gpu/bin/dtrain --out /tmp/ladder [--parts ABC]

Prints one markdown table per part and writes them, with every run's summary, to OUT/ladder.json;
each run's metrics.jsonl is kept as OUT/NAME.metrics.jsonl and its run directory (weights) removed.
Several ranks on one GPU: dtrain gives each its own NCCL host id (docs/RUNNING.md).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

GIB = 1024.0 ** 3
GPT = "bench/configs/gpt2.yaml"


def summary_of(run_dir):
    """The last summary record of a run's metrics.jsonl, or None."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    last = None
    with open(path) as f:
        for line in f:
            if '"summary"' in line:
                last = json.loads(line)
    return last


def run(args, name, overrides, ranks=1, timeout=240):
    """One dtrain run; returns (ok, summary, last lines of its output, seconds)."""
    run_dir = os.path.join(args.out, "runs", name)
    given = [f"run.dir={args.out}/runs", f"run.name={name}", "run.log_every=5", "checkpoint.every_epoch=false",
             "train.eval=false", "run.tf32=true"] + overrides + (["dist.backend=nccl"] if ranks > 1 else [])
    # dtrain refuses a key given twice: --extra replaces the script's setting of a key it names.
    replaced = {e.split("=", 1)[0] for e in args.extra}
    cmd = [args.bin, GPT] + [o for o in given if o.split("=", 1)[0] not in replaced] + args.extra
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks)] + cmd
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = 124
    seconds = time.time() - t0
    with open(os.path.join(args.out, name + ".log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + out)
    s = summary_of(run_dir)
    # Only the records stay: the weights of the larger models are gigabytes each.
    if os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
        shutil.copy(os.path.join(run_dir, "metrics.jsonl"), os.path.join(args.out, name + ".metrics.jsonl"))
    shutil.rmtree(run_dir, ignore_errors=True)
    tail = "\n".join(out.strip().splitlines()[-3:])
    return rc == 0 and s is not None, s, tail, seconds


def gib(s, key="mem_peak"):
    return f"{s[key] / GIB:.2f}" if s and s.get(key) else "-"


def part_a(args, results):
    rows = []
    cases = [("gpt2-124M", 64, []),
             ("gpt2-medium", 32, ["model.n_layer=24", "model.n_head=16", "model.n_embd=1024"])]
    for label, batch, model in cases:
        for ckpt in ("off", "blocks"):
            name = f"a_{label}_{ckpt}"
            ok, s, tail, sec = run(args, name, model + [
                f"train.global_batch={batch}", f"train.micro_batch={batch}", "train.max_steps=25",
                f"data.synthetic_size={batch * 25}", f"train.activation_checkpointing={ckpt}"])
            results[name] = {"ok": ok, "summary": s, "tail": tail, "seconds": sec}
            rows.append((label, batch, ckpt, gib(s) if ok else "failed",
                         f"{s['steady_tokens_per_s']:.0f}" if ok and s.get("steady_tokens_per_s") else "-",
                         s.get("micro_batch") if ok else "-"))
            print(f"[A] {name}: ok={ok} {sec:.0f} s {tail.splitlines()[-1] if tail else ''}", flush=True)
    print("\n| model | B | activation checkpointing | peak GiB | steady tokens/s | micro-batch |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    for label, _, _ in cases:
        a, b = results.get(f"a_{label}_off"), results.get(f"a_{label}_blocks")
        if a and b and a["ok"] and b["ok"]:
            sa, sb = a["summary"], b["summary"]
            line = f"{label}: checkpointing keeps {sb['steady_tokens_per_s'] / sa['steady_tokens_per_s']:.3f} of the speed"
            if sa.get("mem_peak") and sb.get("mem_peak"):  # CUDA runs only
                line += f", {sb['mem_peak'] / sa['mem_peak']:.3f} of the peak memory"
            print(line)


RUNGS = [
    ("the whole batch", ["train.micro_batch=8"], 1),
    ("micro-batches", ["train.micro_batch=auto"], 1),
    ("+ activation checkpointing", ["train.micro_batch=auto", "train.activation_checkpointing=blocks"], 1),
    ("+ optimizer sharded over 4 ranks", ["train.micro_batch=auto", "train.activation_checkpointing=blocks",
                                          "dist.shard_optimizer=true"], 4),
    ("+ gradients sharded too", ["train.micro_batch=auto", "train.activation_checkpointing=blocks",
                                 "dist.shard_optimizer=gradients"], 4),
]


def part_b(args, results):
    widths = [int(w) for w in args.widths.split(",")]
    start = 0
    rows = []
    deadline = time.time() + args.budget_b
    for rung, extra, ranks in RUNGS:
        largest = None
        i = start
        while i < len(widths) and time.time() < deadline:
            w = widths[i]
            name = f"b_{len(rows)}_{w}"
            ok, s, tail, sec = run(args, name, [
                "model.n_layer=24", f"model.n_embd={w}", f"model.n_head={w // 64}",
                "train.global_batch=8", "train.max_steps=3", "data.synthetic_size=32",
                "train.cuda_graph=off", f"run.gpu_memory_fraction={args.fraction}"] + extra, ranks)
            if ok and rung == "the whole batch" and s.get("oom_retries", 0) > 0:
                ok = False  # it trained only after shrinking the micro-batch
            results[name] = {"rung": rung, "width": w, "ok": ok, "summary": s, "tail": tail, "seconds": sec}
            print(f"[B] {rung}, width {w}: ok={ok} {sec:.0f} s", flush=True)
            if not ok:
                break
            largest = (w, s)
            i += 1
        start = max(start, i - 1 if largest else start)
        rows.append((rung, largest))
    print(f"\nrun.gpu_memory_fraction={args.fraction}, 24 layers, B=8, T=1024, bf16, AdamW:\n")
    print("| rung | largest width that trains | parameters | peak GiB (rank 0) | micro-batch |")
    print("| --- | --- | --- | --- | --- |")
    for rung, largest in rows:
        if largest:
            w, s = largest
            params = 24 * 12 * w * w + 50304 * w + 1024 * w
            print(f"| {rung} | {w} | {params / 1e6:.0f}M | {gib(s)} | {s.get('micro_batch')} |")
        else:
            print(f"| {rung} | none of {args.widths} | - | - | - |")


def part_c(args, results):
    rows = []
    for ranks in (1, 2, 4):
        for shard in ("false", "true", "gradients"):
            if ranks == 1 and shard != "false":
                continue
            name = f"c_{ranks}_{shard}"
            ok, s, tail, sec = run(args, name, [
                "train.global_batch=16", "train.max_steps=3", "data.synthetic_size=64",
                "train.cuda_graph=off", f"dist.shard_optimizer={shard}"], ranks)
            results[name] = {"ok": ok, "summary": s, "tail": tail, "seconds": sec}
            rows.append((ranks, shard, gib(s) if ok else "failed"))
            print(f"[C] {name}: ok={ok} {sec:.0f} s", flush=True)
    print("\nGPT-2 124M, B=16 over the ranks, bf16, AdamW: peak memory of rank 0\n")
    print("| ranks | dist.shard_optimizer | peak GiB (rank 0) |")
    print("| --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default="build-gpu/bin/dtrain")
    p.add_argument("--out", default="/tmp/dtrain-ladder")
    p.add_argument("--parts", default="ABC")
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--widths", default="1024,1280,1536,1792,2048,2304,2560")
    p.add_argument("--budget-b", type=float, default=300, help="seconds for part B's search")
    p.add_argument("--extra", nargs="*", default=[],
                   help="overrides appended to every run (a smoke test on the CPU: run.device=cpu "
                        "dist.backend=mpi and a small model)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for part, fn in (("A", part_a), ("B", part_b), ("C", part_c)):
        if part in args.parts:
            t0 = time.time()
            fn(args, results)
            print(f"part {part}: {time.time() - t0:.0f} s", flush=True)
    path = os.path.join(args.out, "ladder.json")  # parts run by an earlier call are kept
    merged = json.load(open(path)) if os.path.exists(path) else {}
    merged.update(results)
    with open(path, "w") as f:
        json.dump(merged, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
