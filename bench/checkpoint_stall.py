#!/usr/bin/env python3
"""What a checkpoint save costs training: runs of one config without checkpoints, with
synchronous saves and with background saves (checkpoint.async), each logged at every step
(run.log_every=1), read from their metrics.jsonl.

  python3 bench/checkpoint_stall.py --every 30 NONE/metrics.jsonl SYNC/metrics.jsonl ASYNC/metrics.jsonl

Each step's wall time is the difference of consecutive records' elapsed_s. The typical step is
the no-checkpoint run's median. A save after step s shows in the steps that follow it (the save
itself, the copies queued on the stream, the first steps beside a background write): its stall
is the sum over steps s+1 .. s+3 of (step time - typical step). The rate while a write runs is
the typical step over the mean step in the `every` steps after each save, as a share. Prints one
Markdown row per run."""
import argparse
import json
import statistics


def step_times(path):
    rows = [json.loads(l) for l in open(path) if '"type":"train"' in l]
    rows.sort(key=lambda r: r["step"])
    return {b["step"]: b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows, rows[1:])
            if b["step"] == a["step"] + 1}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, required=True)
    ap.add_argument("--skip", type=int, default=10, help="warm-up steps left out")
    ap.add_argument("none")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    base = step_times(a.none)
    typical = statistics.median(t for s, t in base.items() if s > a.skip)
    print(f"typical step (no checkpoints): {typical * 1e3:.1f} ms")
    print("| run | saves | stall per save (ms, median) | worst | rate beside a write |")
    print("|---|---|---|---|---|")
    for path in a.runs:
        t = step_times(path)
        saves = [s for s in range(a.every, max(t) + 1, a.every) if s > a.skip and s + 3 in t]
        stalls = [sum(t[s + k] - typical for k in (1, 2, 3)) for s in saves]
        beside = [t[s + k] for s in saves for k in range(1, a.every + 1) if s + k in t]
        rate = typical / statistics.mean(beside) if beside else float("nan")
        if not stalls:  # too few steps after the warm-up for a save
            print(f"| {path} | 0 | - | - | - |")
            continue
        print(f"| {path} | {len(saves)} | {statistics.median(stalls) * 1e3:.0f} | "
              f"{max(stalls) * 1e3:.0f} | {rate * 100:.1f}% |")


if __name__ == "__main__":
    main()
