#!/usr/bin/env python3
"""Writes Fashion-MNIST in CIFAR-10's binary format, for configs/cifar_resnet18.yaml where CIFAR-10
itself cannot be downloaded.

    python3 bench/make_cifar_from_fashion.py OUT [--fashion /usr/share/datasets/fashion-mnist]

Reads the four IDX files of Fashion-MNIST (train-images-idx3-ubyte, train-labels-idx1-ubyte,
t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; each gzipped (.gz) or not, whichever is there)
and writes OUT/data_batch_1.bin .. data_batch_5.bin (the 60000 training images, 12000 a file) and
OUT/test_batch.bin (the 10000 test images), as CIFAR-10's binary version lays them out: records
of 1 label byte (0..9) and 3072 pixel bytes, 1024 red, 1024 green, 1024 blue, rows top to
bottom. Each 28x28 gray image is padded with 2 rows and columns of zeros on every side to 32x32
and its gray value copied into the three channels. Then
    dtrain configs/cifar_resnet18.yaml data.path=OUT
reads it. Needs only numpy (bench/_fashion.py reads the IDX files).
"""
import argparse
import os
import time

import numpy as np

from _fashion import fashion_split


def records(images, labels):
    """(N, 3073) uint8: the label, then 3 planes of the image padded to 32x32 with zeros."""
    n = images.shape[0]
    out = np.zeros((n, 1 + 3 * 32 * 32), np.uint8)
    out[:, 0] = labels
    padded = np.zeros((n, 32, 32), np.uint8)
    padded[:, 2:30, 2:30] = images
    out[:, 1:] = np.repeat(padded[:, None], 3, axis=1).reshape(n, -1)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="folder to write the .bin files into")
    p.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist",
                   help="folder of Fashion-MNIST's IDX files (default: Debian's dataset-fashion-mnist)")
    a = p.parse_args()
    start = time.time()
    tool = "make_cifar_from_fashion"
    train, test = fashion_split(a.fashion, "train", tool), fashion_split(a.fashion, "test", tool)
    os.makedirs(a.out, exist_ok=True)
    rec = records(*train)
    for b, part in enumerate(np.array_split(rec, 5)):
        part.tofile(os.path.join(a.out, f"data_batch_{b + 1}.bin"))
    records(*test).tofile(os.path.join(a.out, "test_batch.bin"))
    print(f"{a.out}: data_batch_1.bin .. data_batch_5.bin ({train[0].shape[0]} images) and test_batch.bin "
          f"({test[0].shape[0]}) from {a.fashion}, {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
