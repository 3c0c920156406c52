"""Feeding and timing shared by the plain-PyTorch benchmarks (bench/torch_*.py); not a script.

The benchmarks import it from their own folder (`python3 bench/torch_gpt2.py` puts bench/ first
on sys.path), so that every one of them times its steps the same way.
"""
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
