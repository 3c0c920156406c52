"""Fashion-MNIST's IDX files read with numpy, for bench/make_cifar_from_fashion.py and
bench/make_jpeg_folder.py --fashion; not a script.

The four files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
t10k-labels-idx1-ubyte) are read gzipped (.gz) or not, whichever is in the folder. A missing,
truncated or malformed file stops the script with a message naming the file.
"""
import gzip
import os
import sys

import numpy as np

NAMES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def read_idx(folder, name, tool):
    """The array of the IDX file `name` (or `name`.gz) in `folder`, and its path."""
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(path):
            break
    else:
        sys.exit(f"{tool}: neither {name} nor {name}.gz in {folder}")
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic >> 8 != 0x08 or magic & 0xFF not in (1, 3):  # unsigned bytes; 1 (labels) or 3 dims
        sys.exit(f"{tool}: {path} is not an IDX file of unsigned bytes (magic {magic:#010x})")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xFF)]
    count, header = int(np.prod(dims)), 4 + 4 * len(dims)
    if len(data) != header + count:
        sys.exit(f"{tool}: {path} holds {len(data) - header} bytes after its header; its dimensions {dims} need {count}")
    return np.frombuffer(data, np.uint8, count=count, offset=header).reshape(dims), path


def fashion_split(folder, which, tool):
    """(images (N, 28, 28) uint8, labels (N,) uint8 in 0..9) of the split "train" or "test"."""
    (images, ipath), (labels, lpath) = (read_idx(folder, n, tool) for n in NAMES[which])
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        sys.exit(f"{tool}: {ipath} holds images of {images.shape[1:]}, not 28x28")
    if labels.shape != (images.shape[0],):
        sys.exit(f"{tool}: {lpath} has {labels.shape[0]} labels for {images.shape[0]} images")
    if labels.max() > 9:
        sys.exit(f"{tool}: {lpath} has label {labels.max()}; Fashion-MNIST has 0..9")
    return images, labels
