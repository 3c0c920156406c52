#!/usr/bin/env python3
"""Summarize one `launch/gpu.sh bench` run: dtrain vs PyTorch, side by side, as a Markdown table.

dtrain's rate is its last progress line (steady state); PyTorch's comes from the JSON line each
bench/torch_*.py prints last."""
import json
import os
import re
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "gpu-out"


def read(name):
    p = os.path.join(out, name + ".log")
    return open(p, errors="replace").read() if os.path.exists(p) else None


def dtrain_rate(name):
    text = read(name)
    if text is None:
        return None, None
    rates = [float(m) for m in re.findall(r"step \d+/\d+ .* ([0-9.]+) samples/s", text)]
    peak = re.search(r"peak GPU memory ([0-9.]+) GiB", text)
    wait = re.search(r"rank 0 time: data ([0-9.]+)%", text)
    WAIT[name] = float(wait.group(1)) if wait else None
    return (rates[-1] if rates else None), (float(peak.group(1)) if peak else None)


def torch_json(name):
    text = read(name)
    if text is None:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def first(d, *keys):
    for k in keys:
        if d and d.get(k) is not None:
            return d[k]
    return None


rows = []
WAIT = {}
# (case, dtrain log, scale samples->unit, unit, [(torch log, label, keys)])
cases = [
    ("GPT-2 124M, B=16 T=1024, bf16", "dtrain_gpt2", 1024, "tokens/s",
     [("torch_gpt2_eager", "eager, loss in the model", ("tokens_per_s",)),
      ("torch_gpt2_compile", "torch.compile, loss in the compiled module", ("tokens_per_s",)),
      ("torch_gpt2_compile_outside", "torch.compile, loss outside (weaker)", ("tokens_per_s",))]),
    ("GPT-2 124M, B=16 T=1024, bf16, eager steps (train.cuda_graph=off)", "dtrain_gpt2_eager", 1024, "tokens/s",
     [("torch_gpt2_eager", "eager", ("tokens_per_s",))]),
    ("GPT-2 124M, B=16 T=1024, fp32 (TF32)", "dtrain_gpt2_fp32", 1024, "tokens/s",
     [("torch_gpt2_fp32", "eager", ("tokens_per_s",))]),
    ("GPT-2 124M, gradient engine on (1 rank, NCCL, overlap)", "dtrain_gpt2_reduce", 1024, "tokens/s",
     [("torch_gpt2_eager", "eager", ("tokens_per_s",))]),
    ("GPT-2 124M, gradient engine on (1 rank, NCCL, no overlap)", "dtrain_gpt2_reduce_nooverlap", 1024, "tokens/s",
     [("torch_gpt2_eager", "eager", ("tokens_per_s",))]),
    ("ResNet-50, batch 128, bf16, channels-last", "dtrain_resnet50", 1, "images/s",
     [("torch_resnet50", "eager", ("images_per_s",)),
      ("torch_resnet50_compile", "torch.compile", ("images_per_s",))]),
    ("ResNet-50, batch 128, bf16, eager steps (train.cuda_graph=off)", "dtrain_resnet50_eager", 1, "images/s",
     [("torch_resnet50", "eager", ("images_per_s",))]),
    ("ResNet-50, batch 128, bf16, from JPEG files (data.format image_folder, 15 loader threads)",
     "dtrain_resnet50_jpeg", 1, "images/s",
     [("torch_resnet50", "eager, one batch kept on the GPU", ("images_per_s",))]),
    ("ResNet-50, batch 128, fp32", "dtrain_resnet50_fp32", 1, "images/s",
     [("torch_resnet50_fp32", "eager", ("images_per_s",))]),
    ("Linear(10,1), batch 128, Adam", "dtrain_tiny", 1 / 128, "steps/s",
     [("torch_tiny", "best of DataLoader / on-GPU", ("steps_per_s_best", "steps_per_s", "steps_per_s_gpu"))]),
    ("Linear(10,1), batch 128, Adam, eager steps (train.cuda_graph=off)", "dtrain_tiny_eager", 1 / 128, "steps/s",
     [("torch_tiny", "best of DataLoader / on-GPU", ("steps_per_s_best", "steps_per_s", "steps_per_s_gpu"))]),
    ("Fashion-MNIST CNN, batch 256, real loader", "dtrain_cnn", 1 / 256, "steps/s",
     [("torch_cnn", "DataLoader", ("steps_per_s",))]),
]
print("| case | dtrain | PyTorch | dtrain / PyTorch | dtrain peak GPU memory | PyTorch peak | dtrain data wait |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for title, dlog, scale, unit, refs in cases:
    rate, peak = dtrain_rate(dlog)
    d = rate * scale if rate is not None else None
    for tlog, label, keys in refs:
        tj = torch_json(tlog)
        t = first(tj, *keys)
        ratio = f"{d / t:.2f}x" if d and t else "n/a"
        tpeak = first(tj, "peak_mem_gb")
        print(f"| {title} ({label}) | {d:,.0f} {unit} |" if d else f"| {title} ({label}) | not run |",
              f"{t:,.0f} {unit} |" if t else "not run |", ratio, "|",
              f"{peak:.1f} GiB" if peak else "-", "|", f"{tpeak:.1f} GB" if tpeak else "-", "|",
              f"{WAIT[dlog]:.1f}% |" if WAIT.get(dlog) is not None else "- |")
