#!/usr/bin/env python3
"""Writes a folder of synthetic JPEGs shaped like ImageNet's, for bench/configs/resnet50_jpeg.yaml,
or Fashion-MNIST as JPEGs in class folders, for configs/imagefolder_resnet.yaml.

    python3 bench/make_jpeg_folder.py OUT [--images 4000] [--classes 100] [--val 0] [--size WxH]
    python3 bench/make_jpeg_folder.py OUT --fashion /usr/share/datasets/fashion-mnist [--images N] [--val N]

OUT/train/<class>/<n>.jpg (and OUT/val/... with --val N), as torchvision's ImageFolder and
dtrain's data.format image_folder read them. Each image is 300-500 x 250-450 pixels (ImageNet's
training images average about 400 x 350 and 110 KB): a gradient, a few random shapes and fine
noise, saved by PIL at quality 90 with 4:2:0 chroma, about 90 KB, so that decoding one costs
about what decoding an ImageNet photo costs. --size 500x375 makes every image that size (the
most common of ImageNet's photos; about 125 KB). The pixels carry no class: the benchmark measures
throughput, not learning. Needs only PIL (Debian's python3-pil); uses every CPU (--jobs).
Prints the count, the mean size in pixels and bytes, and the time taken.

With --fashion DIR: Fashion-MNIST's IDX files in DIR (gzipped or not; bench/_fashion.py) with
their real labels, the training images under OUT/train/<class>/ and the test images under
OUT/val/<class>/, the classes 0_tshirt_top .. 9_ankle_boot (their sorted order is the label's),
each image its 28x28 gray pixels as a one-component JPEG. --images and --val take the first N of
each split (default: all, 60000 and 10000). PIL encodes them when it is installed; without it
bench/_jpeg_gray.py does (numpy only, the same tables and quality scaling as libjpeg; --encoder
numpy chooses it).
"""
import argparse
import io
import multiprocessing
import os
import random
import time

FASHION_CLASSES = ["0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat", "5_sandal", "6_shirt",
                   "7_sneaker", "8_bag", "9_ankle_boot"]


def make_image(rng, size=None):
    from PIL import Image, ImageDraw, ImageFilter  # only the synthetic images need PIL

    w, h = size or (rng.randint(300, 500), rng.randint(250, 450))
    # Large smooth areas and edges: a gradient between two colors, a few shapes on it.
    grad = Image.linear_gradient("L").resize((w, h)).rotate(rng.uniform(0, 360))
    colors = [Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3))) for _ in range(2)]
    img = Image.composite(colors[0], colors[1], grad)
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(3, 8)):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        x1, y1 = x0 + rng.randint(20, w // 2), y0 + rng.randint(20, h // 2)
        color = tuple(rng.randrange(256) for _ in range(3))
        shape = rng.choice(("ellipse", "rectangle", "polygon"))
        if shape == "ellipse":
            draw.ellipse((x0, y0, x1, y1), fill=color)
        elif shape == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=color)
        else:
            draw.polygon([(rng.randrange(w), rng.randrange(h)) for _ in range(rng.randint(3, 6))], fill=color)
    # Texture everywhere: noise blurred below a pixel, mixed in (a photo's entropy per pixel).
    noise = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3)).filter(ImageFilter.GaussianBlur(0.4))
    return Image.blend(img, noise, 0.55)


def write_one(job):
    path, seed, quality, size = job
    img = make_image(random.Random(seed), size)
    img.save(path, quality=quality)
    return img.size[0] * img.size[1], os.path.getsize(path)


def gray_jpeg_encoder(choice):
    """A function (H, W) uint8 -> JPEG bytes, and which encoder it is: PIL's, or with `choice`
    "numpy" or without PIL, bench/_jpeg_gray.py's."""
    try:
        if choice == "numpy":
            raise ImportError
        from PIL import Image
    except ImportError:
        if choice == "pil":
            raise SystemExit("make_jpeg_folder: --encoder pil, but PIL is not installed")
        import _jpeg_gray
        return _jpeg_gray.encode, "bench/_jpeg_gray.py" + ("" if choice == "numpy" else " (no PIL)")

    def encode(pixels, quality):
        buf = io.BytesIO()
        Image.fromarray(pixels, "L").save(buf, format="JPEG", quality=quality)
        return buf.getvalue()
    return encode, "PIL"


def write_fashion(job):
    jobs, quality, choice = job
    encode, _ = gray_jpeg_encoder(choice)
    total = 0
    for path, pixels in jobs:
        data = encode(pixels, quality)
        with open(path, "wb") as f:
            f.write(data)
        total += len(data)
    return total


def fashion(a):
    from _fashion import fashion_split

    start = time.time()
    jobs, counts = [], {}
    for split, which, limit in (("train", "train", a.images), ("val", "test", a.val)):
        images, labels = fashion_split(a.fashion, which, "make_jpeg_folder")
        n = len(images) if limit is None else min(limit, len(images))
        counts[split] = n
        for c in FASHION_CLASSES:
            os.makedirs(os.path.join(a.out, split, c), exist_ok=True)
        for i in range(n):
            jobs.append((os.path.join(a.out, split, FASHION_CLASSES[labels[i]], f"{i:05d}.jpg"), images[i]))
    chunks = [(jobs[k:k + 500], a.quality, a.encoder) for k in range(0, len(jobs), 500)]
    with multiprocessing.Pool(a.jobs) as pool:
        nbytes = sum(pool.map(write_fashion, chunks))
    print(f"{len(jobs)} JPEGs of Fashion-MNIST from {a.fashion} in {a.out} ({counts['train']} train, "
          f"{counts['val']} val, 10 classes; encoded by {gray_jpeg_encoder(a.encoder)[1]}): {nbytes / len(jobs):.0f} bytes "
          f"each on average, {time.time() - start:.1f} s with {a.jobs} processes")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="folder to write (train/ and val/ under it)")
    p.add_argument("--images", type=int, help="training images (default 4000; --fashion: all 60000)")
    p.add_argument("--val", type=int, help="evaluation images under val/ (default 0; --fashion: all 10000)")
    p.add_argument("--fashion", metavar="DIR", help="write Fashion-MNIST's images (IDX files in DIR) with their labels")
    p.add_argument("--encoder", choices=("auto", "pil", "numpy"), default="auto",
                   help="--fashion: who encodes the JPEGs (auto: PIL if installed, else numpy)")
    p.add_argument("--classes", type=int, default=100, help="class folders (default 100)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    p.add_argument("--size", metavar="WxH", help="every image W x H pixels (default: 300-500 x 250-450)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: every CPU)")
    a = p.parse_args()
    if a.fashion:
        return fashion(a)
    a.images = 4000 if a.images is None else a.images
    a.val = 0 if a.val is None else a.val
    size = None
    if a.size:
        try:
            size = tuple(int(v) for v in a.size.lower().split("x"))
        except ValueError:
            size = ()
        if len(size) != 2 or min(size) < 40:
            p.error(f"--size {a.size}: give WIDTHxHEIGHT, each at least 40, e.g. 500x375")
    if a.images < a.classes:
        p.error(f"--images {a.images} is fewer than --classes {a.classes}: every class folder needs an image")
    jobs = []
    for split, count in (("train", a.images), ("val", a.val)):
        for i in range(count):
            d = os.path.join(a.out, split, f"c{i % a.classes:04d}")
            os.makedirs(d, exist_ok=True)
            jobs.append((os.path.join(d, f"{i:07d}.jpg"), a.seed * 1_000_003 + len(jobs), a.quality, size))
    start = time.time()
    with multiprocessing.Pool(a.jobs) as pool:
        sizes = pool.map(write_one, jobs, chunksize=16)
    pixels = sum(s[0] for s in sizes) / len(sizes)
    nbytes = sum(s[1] for s in sizes)
    print(f"{len(sizes)} JPEGs in {a.out} ({a.images} train, {a.val} val, {a.classes} classes): "
          f"{pixels / 1e3:.0f} kilopixels and {nbytes / len(sizes) / 1e3:.0f} KB each on average, "
          f"{nbytes / 1e6:.0f} MB in all, {time.time() - start:.1f} s with {a.jobs} processes")


if __name__ == "__main__":
    main()
