"""Feeding, timing and profiling shared by the plain-PyTorch benchmarks (bench/torch_*.py); not a
script.

The benchmarks import it from their own folder (`python3 bench/torch_gpt2.py` puts bench/ first
on sys.path), so that every one of them times and profiles its steps the same way.
"""
import gzip
import os
import shutil
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def device_name(dev):
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def synchronizer(dev):
    """A function that waits for the device's queued work (nothing to wait for on the CPU)."""
    return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def peak_mem_gb(dev):
    """CUDA's peak allocated memory since time_steps reset it; None on the CPU."""
    return round(torch.cuda.max_memory_allocated() / 1e9, 3) if dev.type == "cuda" else None


def time_steps(step, warmup, steps, dev):
    """Runs step() `warmup` times, then times `steps` more calls: between CUDA events on a GPU,
    by the wall clock elsewhere. Resets CUDA's peak-memory statistics first.

    Returns (the last step's result, warm-up seconds, timed seconds)."""
    cuda = dev.type == "cuda"
    sync = synchronizer(dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(warmup):
        loss = step()
    sync()
    warmup_s = time.perf_counter() - t0

    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    if cuda:
        end.record()
        sync()
        elapsed = start.elapsed_time(end) / 1e3
    else:
        elapsed = time.perf_counter() - t0
    return loss, warmup_s, elapsed


def batches(x, y, batch, dev, preloaded, workers):
    """One epoch of shuffled (inputs, targets) batches on `dev`, the last partial batch dropped.

    preloaded: all the data is copied to `dev` first and batches are slices of a per-epoch
    permutation. Otherwise a torch.utils.data.DataLoader with `workers` worker processes, and on
    a GPU pinned memory and non-blocking copies."""
    if preloaded:
        xg, yg = x.to(dev), y.to(dev)
        perm = torch.randperm(x.size(0), device=dev)
        for i in range(x.size(0) // batch):
            idx = perm[i * batch:(i + 1) * batch]
            yield xg[idx], yg[idx]
        return
    pin = dev.type == "cuda"
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, drop_last=True,
                        num_workers=workers, pin_memory=pin)
    for xb, yb in loader:
        yield xb.to(dev, non_blocking=pin), yb.to(dev, non_blocking=pin)


def time_epoch(batches, step, warmup, dev, max_steps=0):
    """Calls step(inputs, targets) on each batch; the clock starts after `warmup` steps (so that
    loader start-up is not timed). Stops after `max_steps` steps unless that is 0.

    Returns (timed steps, timed seconds, the last step's result)."""
    sync = synchronizer(dev)
    timed = 0
    t0 = None
    for i, (xb, yb) in enumerate(batches):
        if i == warmup:
            sync()
            t0 = time.perf_counter()
        loss = step(xb, yb)
        if t0 is not None:
            timed += 1
        if max_steps and i + 1 >= max_steps:
            break
    sync()
    return timed, time.perf_counter() - t0, loss


# The name of one training step's range in a trace: dtrain's traces mark their steps with the
# same name, so that bench/trace_summary.py finds the steps of both.
STEP_RANGE = "dtrain_step"


def add_profile_args(ap):
    """--profile PATH and --profile-steps N on a benchmark's argument parser."""
    ap.add_argument("--profile", metavar="PATH",
                    help="after the timed run, profile --profile-steps more steps with "
                         "torch.profiler and write the Chrome trace to PATH (.gz: compressed); "
                         "each step is a '" + STEP_RANGE + "' range. Read it with "
                         "bench/trace_summary.py")
    ap.add_argument("--profile-steps", type=int, default=5, metavar="N",
                    help="steps in the trace (default 5)")


def tagged_path(path, tag):
    """PATH with `.tag` before its .json / .json.gz / other extension: one trace per mode."""
    for ext in (".json.gz", ".json", ".gz"):
        if path.endswith(ext):
            return path[:-len(ext)] + "." + tag + ext
    root, ext = os.path.splitext(path)
    return root + "." + tag + ext


def profile_steps(step, steps, dev, path):
    """Profiles `steps` calls of step() with torch.profiler (CPU, and CUDA on a GPU), each inside a
    STEP_RANGE range, and writes the Chrome trace (Kineto JSON) to `path` (gzipped if it ends in
    .gz). Returns `path`.

    One more step runs first with the profiler on but not recording (its warm-up: the tracer's
    start-up cost stays out of the trace), then the device is synchronized, so that the first
    traced step starts on an idle GPU as time_steps' first timed step does. The device is
    synchronized again after the last step, before the profiler stops, so that the trace holds
    all of the steps' GPU work."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    sync = synchronizer(dev)
    gz = path.endswith(".gz")
    out = tempfile.mkstemp(suffix=".json")[1] if gz else path

    def export(prof):
        prof.export_chrome_trace(out)

    once = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=activities, schedule=once, on_trace_ready=export) as prof:
        for i in range(steps + 1):  # 0: the profiler's warm-up step, not recorded
            with record_function(STEP_RANGE):
                step()
            if i == 0 or i == steps:
                sync()
            prof.step()
    if gz:
        with open(out, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(out)
    return path


def endless(epoch):
    """Batches from epoch(), then from another epoch(), and so on: steps for a profile that may
    run past the end of an epoch."""
    while True:
        empty = True
        for b in epoch():
            empty = False
            yield b
        if empty:
            raise ValueError("an epoch with no batch")
