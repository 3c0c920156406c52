#!/usr/bin/env python3
"""Which scaled-dot-product-attention backend is fastest for a model's attention shape: each
backend PyTorch has on this GPU (flash, cuDNN, memory-efficient), forward + backward of causal
attention in bf16, timed between CUDA events; and the one PyTorch picks by default. dtrain's
`model.attention` key chooses among the same backends.

  python3 bench/sdpa_backends.py                      # GPT-2 124M: B=16, H=12, T=1024, D=64
  python3 bench/sdpa_backends.py --batch 32 --heads 16 --seq 2048 --dim 64

Prints one JSON line per backend: {"backend": ..., "ms_fwd_bwd": ..., "default": bool}.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    dev = torch.device("cuda")
    shape = (args.batch, args.heads, args.seq, args.dim)
    q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=dev, dtype=torch.bfloat16)
    default = None
    try:
        default = SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, True)).name
    except Exception as e:  # private API: report, don't fail
        default = f"unknown ({e})"
    ref = None
    for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        row = {"backend": b.name, "shape": list(shape), "default": b.name == default}
        try:
            with sdpa_kernel([b]):
                def step():
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    out.backward(grad)
                    return out
                for _ in range(5):
                    out = step()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.steps):
                    out = step()
                end.record()
                torch.cuda.synchronize()
                row["ms_fwd_bwd"] = round(start.elapsed_time(end) / args.steps, 4)
                if ref is None:
                    ref = out.detach().float()
                row["max_abs_diff_vs_first"] = round((out.detach().float() - ref).abs().max().item(), 5)
        except Exception as e:
            row["error"] = str(e).splitlines()[0][:200]
        print(json.dumps(row), flush=True)
    print(json.dumps({"default_backend": default, "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(dev)}))


if __name__ == "__main__":
    main()
