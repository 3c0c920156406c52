#!/usr/bin/env python3
"""ResNet training step in plain PyTorch: what a user would run instead of dtrain.

torchvision's ResNet-50 (or --arch resnet18), batch 128 of random 3x224x224 images and labels
already on the GPU, bf16 autocast (--fp32: none), channels-last, SGD with momentum 0.9 (lr 0.05,
weight decay 1e-4), cuDNN autotuning on as a user would set it; `--compile` wraps the model in
`torch.compile`. Warms up, times `--steps` steps
between CUDA events, and prints one JSON line:

  {"case": "resnet50", "mode": "eager"|"compile", "precision": "bf16"|"fp32", "images_per_s": ..., "ms_per_step": ...,
   "peak_mem_gb": ..., ...}

  python3 bench/torch_resnet.py
  python3 bench/torch_resnet.py --fp32
  python3 bench/torch_resnet.py --compile
  python3 bench/torch_resnet.py --compile --mode max-autotune-no-cudagraphs
  python3 bench/torch_resnet.py --arch resnet18
  python3 bench/torch_resnet.py --profile resnet.json   # and a trace of 5 more steps
"""
import argparse
import json

import torch
import torch.nn.functional as F
import torchvision

from _common import add_profile_args, device_name, peak_mem_gb, profile_steps, time_steps


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["resnet18", "resnet50"], default="resnet50")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--mode", default=None,
                    help="torch.compile's mode (default, reduce-overhead, max-autotune-no-cudagraphs, ...)")
    ap.add_argument("--fp32", action="store_true", help="no autocast: float32 throughout")
    ap.add_argument("--no-channels-last", action="store_true", help="keep NCHW")
    ap.add_argument("--no-cudnn-benchmark", action="store_true")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224, help="image height and width")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_profile_args(ap)
    args = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = not args.no_cudnn_benchmark
    fmt = torch.contiguous_format if args.no_channels_last else torch.channels_last
    model = getattr(torchvision.models, args.arch)(num_classes=args.classes)
    model = model.to(dev, memory_format=fmt)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    step_model = torch.compile(model, mode=args.mode) if args.compile else model
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch,), device=dev)

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=not args.fp32):
            out = step_model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    loss, _, elapsed = time_steps(step, args.warmup, args.steps, dev)

    result = {
        "case": args.arch,
        "mode": ("compile" + (f" ({args.mode})" if args.mode else "")) if args.compile else "eager",
        "precision": "fp32" if args.fp32 else "bf16",
        "channels_last": not args.no_channels_last,
        "images_per_s": round(args.batch * args.steps / elapsed, 1),
        "ms_per_step": round(1e3 * elapsed / args.steps, 3),
        "peak_mem_gb": peak_mem_gb(dev),
        "params": sum(p.numel() for p in model.parameters()),
        "batch": args.batch, "steps": args.steps, "final_loss": round(loss.item(), 4),
        "device": device_name(dev),
        "torch": torch.__version__,
    }
    if args.profile:
        result["profile"] = profile_steps(step, args.profile_steps, dev, args.profile)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
