#!/usr/bin/env python3
"""ResNet training under PyTorch DDP on the ranks of an `mpirun`: what a DDP user runs instead of
dtrain with several ranks, with BatchNorm per rank or torch.nn.SyncBatchNorm.

Each rank: torchvision's ResNet-50 (or --arch resnet18), --batch random 3x224x224 images and
labels already on the GPU, bf16 autocast, channels-last, SGD with momentum 0.9 (lr 0.05, weight
decay 1e-4, fused where this torch has it), cuDNN autotuning on; the model wrapped in
DistributedDataParallel (NCCL; broadcast_buffers at its default, True); --sync-bn converts every
BatchNorm with nn.SyncBatchNorm.convert_sync_batchnorm first; --compile wraps the DDP module in
torch.compile (--mode: its mode). Ranks that share a GPU get NCCL's settings for that as dtrain
gives them (Note [ranks sharing a GPU]: a host identity each, sockets over loopback), so the two
are compared on the same transport. Warms up, times --steps steps between CUDA events
(_common.time_steps; the slowest rank's time), and rank 0 prints one JSON line:

  {"case": "resnet50", "world": N, "sync_bn": ..., "mode": "eager"|"compile", "images_per_s": ...
   (over every rank), "ms_per_step": ..., "peak_mem_gb": ... (rank 0), ...}

  mpirun -np 2 python3 bench/torch_ddp_resnet.py --sync-bn
  mpirun -np 4 python3 bench/torch_ddp_resnet.py
  mpirun -np 2 python3 bench/torch_ddp_resnet.py --sync-bn --compile
  python3 bench/torch_ddp_resnet.py --device cpu --arch resnet18 --size 32 --batch 8   # a check
"""
import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision

from _common import time_steps


def rank_and_world():
    """This process's rank and the job's size, from Open MPI's variables (1 rank without them)."""
    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", 0)))
    world = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", 1)))
    local = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("LOCAL_RANK", rank)))
    return rank, world, local


def share_gpu(rank, world, gpus):
    """NCCL's variables for ranks that share a GPU, as dtrain's Note [ranks sharing a GPU]."""
    if gpus >= world:
        return
    os.environ.update({"NCCL_HOSTID": f"{socket.gethostname()}.torch-rank{rank}",
                       "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                       "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"})


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["resnet18", "resnet50"], default="resnet50")
    ap.add_argument("--sync-bn", action="store_true", help="nn.SyncBatchNorm")
    ap.add_argument("--compile", action="store_true", help="torch.compile the DDP module")
    ap.add_argument("--mode", default=None, help="torch.compile's mode")
    ap.add_argument("--batch", type=int, default=128, help="images per rank")
    ap.add_argument("--size", type=int, default=224, help="image height and width")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    rank, world, local = rank_and_world()
    cuda = args.device == "cuda"
    gpus = torch.cuda.device_count() if cuda else 0
    if cuda:
        share_gpu(rank, world, gpus)
    dev = torch.device("cuda", local % gpus) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=rank, world_size=world)
    torch.manual_seed(0)
    fmt = torch.channels_last
    model = getattr(torchvision.models, args.arch)(num_classes=args.classes)
    if args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(dev, memory_format=fmt)
    model.train()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    fused = {"fused": True} if cuda and "fused" in torch.optim.SGD.__init__.__code__.co_varnames else {}
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4, **fused)
    step_model = torch.compile(ddp, mode=args.mode) if args.compile else ddp
    torch.manual_seed(1 + rank)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch,), device=dev)

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda):
            out = step_model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    loss, warmup_s, elapsed = time_steps(step, args.warmup, args.steps, dev)
    slowest = torch.tensor([elapsed], device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    elapsed = slowest.item()
    if rank == 0:
        print(json.dumps({
            "case": args.arch, "world": world, "sync_bn": args.sync_bn,
            "mode": ("compile" + (f" ({args.mode})" if args.mode else "")) if args.compile else "eager",
            "batch_per_rank": args.batch, "images_per_s": round(world * args.batch * args.steps / elapsed, 1),
            "ms_per_step": round(1e3 * elapsed / args.steps, 3), "warmup_s": round(warmup_s, 1),
            "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3) if cuda else None,
            "final_loss": round(loss.item(), 4), "gpus": gpus, "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
            "torch": torch.__version__, "fused_sgd": bool(fused)}), flush=True)
    # Straight out: a process group torn down at exit can hang (gloo in torch 1.13).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
