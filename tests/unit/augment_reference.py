#!/usr/bin/env python3
"""torchvision's automatic augmentation and RandomErasing on given images, for
tests/unit/test_auto_augment.cpp (Debian's python3-torch and python3-torchvision).

  augment_reference.py ops IMAGES JOBS OUT
      IMAGES: raw uint8 images; each line of JOBS: "OFFSET C H W OP MAGNITUDE [OP MAGNITUDE ...]":
      the (C, H, W) image at byte OFFSET of IMAGES, each op applied in turn by
      torchvision.transforms.autoaugment._apply_op(img, OP, MAGNITUDE, NEAREST, None); the results'
      bytes appended to OUT in the order of the lines
  augment_reference.py tables H W
      prints the op spaces: "SPACE OP SIGNED V1 V2 ..." (no values for a 0-dim table) for
      TrivialAugmentWide()._augmentation_space(31) (SPACE trivial), RandAugment's (31, (H, W))
      (rand) and AutoAugment's (10, (H, W)) (auto); then AutoAugment's ImageNet policies, one a
      line: "policy OP P BIN OP P BIN" (BIN -1 for None)
  augment_reference.py erase IMAGES N C H W BOXES OUT
      IMAGES: N raw float32 images (C, H, W); each line of BOXES: "I J H W" for the image of that
      line: F.erase(img, I, J, H, W, v) with RandomErasing's v for value=0; OUT: the float32 results
"""
import sys

import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F
from torchvision.transforms.autoaugment import AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide, _apply_op


def ops(images_path, jobs_path, out_path):
    data = open(images_path, "rb").read()
    out = bytearray()
    with open(jobs_path) as jobs:
        for line in jobs:
            f = line.split()
            if not f:
                continue
            offset, c, h, w = (int(x) for x in f[:4])
            img = torch.frombuffer(bytearray(data[offset : offset + c * h * w]), dtype=torch.uint8).reshape(c, h, w)
            for name, magnitude in zip(f[4::2], f[5::2]):
                img = _apply_op(img, name, float(magnitude), interpolation=InterpolationMode.NEAREST, fill=None)
            out += img.contiguous().numpy().tobytes()
    open(out_path, "wb").write(bytes(out))


def print_space(name, space):
    for op, (magnitudes, signed) in space.items():
        values = [repr(float(v)) for v in magnitudes.tolist()] if magnitudes.ndim > 0 else []
        print(name, op, int(signed), *values)


def tables(h, w):
    print_space("trivial", TrivialAugmentWide()._augmentation_space(31))
    print_space("rand", RandAugment()._augmentation_space(31, (h, w)))
    print_space("auto", AutoAugment()._augmentation_space(10, (h, w)))
    for policy in AutoAugment()._get_policies(AutoAugmentPolicy.IMAGENET):
        fields = []
        for op, p, magnitude_id in policy:
            fields += [op, repr(p), str(-1 if magnitude_id is None else magnitude_id)]
        print("policy", *fields)


def erase(images_path, n, c, h, w, boxes_path, out_path):
    images = torch.frombuffer(bytearray(open(images_path, "rb").read()), dtype=torch.float32).reshape(n, c, h, w)
    boxes = [[int(x) for x in line.split()] for line in open(boxes_path) if line.strip()]
    v = torch.tensor([0])[:, None, None]  # RandomErasing.forward: value [0], get_params' v
    out = [F.erase(images[k], i, j, bh, bw, v) for k, (i, j, bh, bw) in enumerate(boxes)]
    open(out_path, "wb").write(torch.stack(out).contiguous().numpy().tobytes())


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "ops":
        ops(*args)
    elif command == "tables":
        tables(int(args[0]), int(args[1]))
    elif command == "erase":
        erase(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), args[5], args[6])
    else:
        sys.exit("unknown command " + command)
