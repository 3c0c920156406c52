#!/usr/bin/env python3
"""torchvision's reference image recipe in plain PyTorch: what a user would run instead of dtrain's
configs/imagenet_resnet50.yaml keys (data.auto_augment, data.random_erase, train.label_smoothing,
train.mixup_alpha, train.cutmix_alpha, train.ema_decay), on a JPEG folder.

ResNet-50 (torchvision's, --arch resnet18 too) from an ImageFolder (OUT/train/<class>/*.jpg, as
bench/make_jpeg_folder.py writes it), batch 128, bf16 autocast, channels-last, SGD lr 0.05 momentum
0.9 weight decay 1e-4 (fused where this torch has it, else foreach), cuDNN autotuning on:

  --decode cpu (default): torchvision's reference preset (references/classification/presets.py,
      its --use-v2 path where transforms.v2 exists) in DataLoader workers: PIL decode,
      RandomResizedCrop(224), RandomHorizontalFlip, TrivialAugmentWide, PILToTensor, to float,
      Normalize, RandomErasing(0.1); pinned memory, persistent workers, --prefetch batches per
      worker, non-blocking copies.
  --decode gpu: the workers only read the files (a batch's bytes in one tensor);
      torchvision.io.decode_jpeg decodes the
      batch on --device (nvJPEG on a GPU: batched where torchvision >= 0.19 takes a list), then
      each image gets RandomResizedCrop, RandomHorizontalFlip and TrivialAugmentWide as a uint8
      tensor on the device (transforms.v2, else v1, both take tensors), the batch is standardized
      there and RandomErasing runs on each image. On a GPU this runs on a CUDA stream of its own
      after the previous step is queued, so that its host work overlaps the step's GPU work.
      Each image's transforms are calls of their own from Python (each image draws its own crop
      and op), a few hundred small kernels a batch: on an H100 the batch of 128 takes about
      60 ms of the host (decode 6, crops 13, TrivialAugmentWide 26), more than the step's GPU
      time, so this path runs at the host's pace on any number of cores.

Then, on the device: MixUp(0.2) or CutMix(1.0) on the batch, one of them at random
(transforms.v2.RandomChoice of v2.MixUp / v2.CutMix where they exist, else the reference's
RandomMixup / RandomCutmix written out below), as the reference does in its collate function but
on the GPU instead of in the workers; CrossEntropyLoss(label_smoothing=0.1) on the mixed targets;
an EMA of the weights and buffers (torch.optim.swa_utils.AveragedModel, multi-tensor where this
torch has get_ema_multi_avg_fn) updated every 32 steps with the reference's rule
d = 1 - min(1, (1 - 0.99998) batch 32 / epochs). --compile default|reduce-overhead wraps the
module that returns the loss in torch.compile (none: eager).

The sampler draws successive random permutations of the folder in one pass: a folder of 4000
images is 31 steps an epoch, and a DataLoader's restart at each epoch (its workers' first batches
made while the GPU waits) would weigh here as it never does on ImageNet's 10,000 steps an epoch.
Warms up --warmup steps (torch.compile's compilation among them), times --steps steps between
CUDA events (the loader's waits included) and prints one JSON line:

  {"case": "resnet50_recipe", "decode": "cpu"|"gpu", "mode": "eager"|"compile"|..., "cores": ...,
   "workers": ..., "images_per_s": ..., "ms_per_step": ..., ...}

  python3 bench/make_jpeg_folder.py /tmp/dtrain-jpeg --images 4000
  python3 bench/torch_image_recipe.py --data /tmp/dtrain-jpeg --compile default
  taskset -c 0-2 python3 bench/torch_image_recipe.py --compile default            # 2 workers
  python3 bench/torch_image_recipe.py --decode gpu --compile reduce-overhead
  python3 bench/torch_image_recipe.py --device cpu --steps 2 --warmup 1 --batch 4 --size 64 \\
      --compile none --data /tmp/recipe-jpeg                                       # a smoke test
"""
import argparse
import contextlib
import inspect
import json
import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T1
from torch.utils.data import DataLoader, RandomSampler

from _common import device_name, peak_mem_gb, time_steps

try:
    from torchvision.transforms import v2 as T2
except ImportError:  # torchvision < 0.16
    T2 = None

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def version(module):
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in module.__version__.split("+")[0].split(".")[:2])


# ---- the images -------------------------------------------------------------------------------

def cpu_preset(size, erase):
    """The reference's ClassificationPresetTrain (auto_augment ta_wide, random_erase) on PIL images."""
    if T2 is not None:
        return T2.Compose([T2.RandomResizedCrop(size, antialias=True), T2.RandomHorizontalFlip(),
                           T2.TrivialAugmentWide(), T2.PILToTensor(), T2.ToDtype(torch.float32, scale=True),
                           T2.Normalize(MEAN, STD), T2.RandomErasing(erase, value=0)])
    return T1.Compose([T1.RandomResizedCrop(size), T1.RandomHorizontalFlip(), T1.TrivialAugmentWide(),
                       T1.PILToTensor(), T1.ConvertImageDtype(torch.float32), T1.Normalize(MEAN, STD),
                       T1.RandomErasing(erase, value=0)])


def read_bytes(path):
    """A file's bytes (the --decode gpu workers' whole job)."""
    with open(path, "rb") as f:
        return f.read()


def collate_bytes(samples):
    """A batch of files as one uint8 tensor (one shared-memory block to the main process, not one
    per file), their lengths and their labels."""
    flat = torch.frombuffer(bytearray(b"".join(b for b, _ in samples)), dtype=torch.uint8)
    return flat, torch.tensor([len(b) for b, _ in samples]), torch.tensor([label for _, label in samples])


class DeviceImages:
    """--decode gpu: a batch of file bytes -> standardized float images on the device."""

    def __init__(self, dev, size, erase):
        T = T2 if T2 is not None else T1
        self.dev = dev
        self.augment = T.Compose([T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip(),
                                  T.TrivialAugmentWide()])
        self.erase = T.RandomErasing(erase, value=0, inplace=True) if erase > 0 else None
        self.mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=dev).view(1, 3, 1, 1)
        # decode_jpeg takes a list (one batched nvJPEG call) from torchvision 0.19.
        self.batched = version(torchvision) >= (0, 19)
        self.stream = torch.cuda.Stream(dev) if dev.type == "cuda" else None

    def decode(self, datas):
        from torchvision.io import ImageReadMode, decode_jpeg

        device = str(self.dev)
        if self.batched:
            return decode_jpeg(datas, mode=ImageReadMode.RGB, device=device)
        return [decode_jpeg(d, mode=ImageReadMode.RGB, device=device) for d in datas]

    def __call__(self, flat, lengths, labels):
        ctx = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        with ctx:
            images = [self.augment(im) for im in self.decode(list(torch.split(flat, lengths.tolist())))]
            x = torch.stack(images).float().div_(255).sub_(self.mean).div_(self.std)
            if self.erase is not None:
                for i in range(x.size(0)):
                    self.erase(x[i])  # in place: erases with probability p
            y = labels.to(self.dev, non_blocking=True)
        if self.stream is not None:
            main = torch.cuda.current_stream(self.dev)
            main.wait_stream(self.stream)
            x.record_stream(main)
            y.record_stream(main)
        return x, y


# ---- MixUp / CutMix ---------------------------------------------------------------------------

def reference_mixup(batch, target, alpha):
    """references/classification/transforms.py RandomMixup(p=1.0) on one-hot targets, in place."""
    batch_rolled = batch.roll(1, 0)
    target_rolled = target.roll(1, 0)
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    batch_rolled.mul_(1.0 - lam)
    batch.mul_(lam).add_(batch_rolled)
    target_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(target_rolled)
    return batch, target


def reference_cutmix(batch, target, alpha):
    """references/classification/transforms.py RandomCutmix(p=1.0) on one-hot targets, in place."""
    batch_rolled = batch.roll(1, 0)
    target_rolled = target.roll(1, 0)
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    H, W = batch.shape[-2:]
    r_x = torch.randint(W, (1,))
    r_y = torch.randint(H, (1,))
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * W), int(r * H)
    x1 = int(torch.clamp(r_x - r_w_half, min=0))
    y1 = int(torch.clamp(r_y - r_h_half, min=0))
    x2 = int(torch.clamp(r_x + r_w_half, max=W))
    y2 = int(torch.clamp(r_y + r_h_half, max=H))
    batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
    lam = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
    target_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(target_rolled)
    return batch, target


class Mixer:
    """MixUp or CutMix, one at random per batch (the reference's RandomChoice); integer labels in,
    soft targets out."""

    def __init__(self, classes, mixup_alpha, cutmix_alpha):
        self.classes = classes
        self.fn = None
        self.kind = "none"
        if mixup_alpha <= 0 and cutmix_alpha <= 0:
            return
        if T2 is not None and hasattr(T2, "MixUp"):
            choices = ([T2.MixUp(alpha=mixup_alpha, num_classes=classes)] if mixup_alpha > 0 else []) + \
                      ([T2.CutMix(alpha=cutmix_alpha, num_classes=classes)] if cutmix_alpha > 0 else [])
            self.fn = T2.RandomChoice(choices) if len(choices) > 1 else choices[0]
            self.kind = "torchvision.transforms.v2"
            return
        choices = ([lambda b, t: reference_mixup(b, t, mixup_alpha)] if mixup_alpha > 0 else []) + \
                  ([lambda b, t: reference_cutmix(b, t, cutmix_alpha)] if cutmix_alpha > 0 else [])

        def mix(batch, labels):
            target = F.one_hot(labels, self.classes).to(batch.dtype)
            return random.choice(choices)(batch, target)

        self.fn = mix
        self.kind = "reference (written out)"

    def __call__(self, x, y):
        return self.fn(x, y) if self.fn is not None else (x, y)


# ---- the step ---------------------------------------------------------------------------------

class LossModule(nn.Module):
    """The model and its loss in one module: what --compile compiles."""

    def __init__(self, model, criterion, dev_type):
        super().__init__()
        self.model = model
        self.criterion = criterion
        self.dev_type = dev_type

    def forward(self, x, target):
        with torch.autocast(device_type=self.dev_type, dtype=torch.bfloat16):
            out = self.model(x)
        return self.criterion(out.float(), target)


def make_ema(model, decay):
    """torchvision's ExponentialMovingAverage (references/classification/utils.py): an
    AveragedModel of the weights and buffers, ema = d ema + (1 - d) model."""
    from torch.optim import swa_utils

    if hasattr(swa_utils, "get_ema_multi_avg_fn"):
        return swa_utils.AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(decay),
                                       use_buffers=True), "AveragedModel, multi-tensor"

    def ema_avg(avg, param, num_averaged):
        return decay * avg + (1 - decay) * param

    return swa_utils.AveragedModel(model, avg_fn=ema_avg, use_buffers=True), "AveragedModel"


def make_sgd(params, cuda):
    kw = dict(lr=0.05, momentum=0.9, weight_decay=1e-4)
    sig = inspect.signature(torch.optim.SGD.__init__).parameters
    if cuda and "fused" in sig:
        return torch.optim.SGD(params, fused=True, **kw), "SGD fused"
    if "foreach" in sig:
        return torch.optim.SGD(params, foreach=True, **kw), "SGD foreach"
    return torch.optim.SGD(params, **kw), "SGD"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/dtrain-jpeg", help="the folder (its train/ if it has one)")
    ap.add_argument("--decode", choices=["cpu", "gpu"], default="cpu",
                    help="cpu: PIL in the workers; gpu: decode_jpeg and the transforms on --device")
    ap.add_argument("--compile", choices=["default", "reduce-overhead", "none"], default="default")
    ap.add_argument("--arch", choices=["resnet18", "resnet50"], default="resnet50")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224, help="RandomResizedCrop's size")
    ap.add_argument("--workers", type=int, default=-1, help="DataLoader workers (default: cores - 1, at least 1)")
    ap.add_argument("--prefetch", type=int, default=4, help="batches ready ahead per worker")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--random-erase", type=float, default=0.1)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--mixup-alpha", type=float, default=0.2)
    ap.add_argument("--cutmix-alpha", type=float, default=1.0)
    ap.add_argument("--ema-decay", type=float, default=0.99998, help="0: no EMA")
    ap.add_argument("--ema-every", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=600, help="the EMA rule's epochs (the recipe's 600)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    torch.manual_seed(0)
    random.seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    if args.compile != "none" and not hasattr(torch, "compile"):
        raise SystemExit(f"torch {torch.__version__} has no torch.compile: use --compile none")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = args.workers if args.workers >= 0 else max(1, cores - 1)
    fmt = torch.channels_last

    root = os.path.join(args.data, "train") if os.path.isdir(os.path.join(args.data, "train")) else args.data
    if args.decode == "cpu":
        ds = torchvision.datasets.ImageFolder(root, transform=cpu_preset(args.size, args.random_erase))
        collate = None
        images = None
    else:
        ds = torchvision.datasets.ImageFolder(root, loader=read_bytes)
        collate = collate_bytes
        images = DeviceImages(dev, args.size, args.random_erase)
    classes = len(ds.classes)
    sampler = RandomSampler(ds, num_samples=args.batch * (args.warmup + args.steps + 2))
    loader_kw = dict(persistent_workers=True, prefetch_factor=args.prefetch) if workers > 0 else {}
    loader = DataLoader(ds, batch_size=args.batch, sampler=sampler, num_workers=workers, pin_memory=cuda,
                        drop_last=True, collate_fn=collate, **loader_kw)

    model = getattr(torchvision.models, args.arch)(num_classes=classes).to(dev, memory_format=fmt)
    model.train()
    ema, ema_kind = None, "none"
    decay = None
    if args.ema_decay > 0:
        alpha = min(1.0, (1.0 - args.ema_decay) * args.batch * args.ema_every / args.epochs)
        decay = 1.0 - alpha
        ema, ema_kind = make_ema(model, decay)
    opt, opt_kind = make_sgd(model.parameters(), cuda)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    loss_module = LossModule(model, criterion, dev.type)
    if args.compile == "none":
        step_module = loss_module
    else:
        step_module = torch.compile(loss_module, mode=None if args.compile == "default" else args.compile)
    graphs = args.compile == "reduce-overhead"
    mixer = Mixer(classes, args.mixup_alpha, args.cutmix_alpha)
    batches = iter(loader)
    count = [0]

    def next_batch():
        if images is not None:
            x, y = images(*next(batches))
        else:
            xb, yb = next(batches)
            x, y = xb.to(dev, non_blocking=cuda), yb.to(dev, non_blocking=cuda)
        x, target = mixer(x, y)
        # Channels-last after the mixing (MixUp's roll gives a contiguous tensor): one copy.
        return x.contiguous(memory_format=fmt), target

    def step():
        x, target = next_batch()
        if graphs and hasattr(torch, "compiler") and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()
        loss = step_module(x, target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None and count[0] % args.ema_every == 0:
            ema.update_parameters(model)
        count[0] += 1
        return loss.detach().clone() if graphs else loss.detach()

    loss, warmup_s, elapsed = time_steps(step, args.warmup, args.steps, dev)
    result = {
        "case": args.arch + "_recipe",
        "decode": args.decode,
        "mode": "eager" if args.compile == "none" else "compile" + ("" if args.compile == "default" else f" ({args.compile})"),
        "cores": cores, "workers": workers,
        "images_per_s": round(args.batch * args.steps / elapsed, 1),
        "ms_per_step": round(1e3 * elapsed / args.steps, 3),
        "warmup_s": round(warmup_s, 1),
        "peak_mem_gb": peak_mem_gb(dev),
        "batch": args.batch, "size": args.size, "steps": args.steps, "warmup": args.warmup,
        "final_loss": round(loss.item(), 4),
        "precision": "bf16", "channels_last": True,
        "transforms": "v2" if T2 is not None else "v1",
        "gpu_decode": None if images is None else ("batched" if images.batched else "per image"),
        "mix": mixer.kind, "label_smoothing": args.label_smoothing, "random_erase": args.random_erase,
        "ema": ema_kind, "ema_decay_per_update": decay, "ema_every": args.ema_every,
        "optimizer": opt_kind, "images": len(ds), "classes": classes,
        "device": device_name(dev),
        "torch": torch.__version__, "torchvision": torchvision.__version__,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
