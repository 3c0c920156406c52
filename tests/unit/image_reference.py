#!/usr/bin/env python3
"""Reference images and pixels for the image-folder tests, from PIL (Debian's python3-pil).

  image_reference.py make DIR    writes test images into DIR; prints "NAME WIDTH HEIGHT" for each,
                                 and writes DIR/NAME.rgb: the pixels the loader must give, PIL's
                                 Image.open(f).convert("RGB") as raw (H, W, 3) bytes (gray16.png:
                                 the high byte of each sample, the formula dtrain documents)
  image_reference.py run JOBS    each line of JOBS: OUT OP FILE ARGS..., writes OUT as raw bytes:
    decode FILE                          PIL's RGB pixels, (H, W, 3)
    draft FILE DENOM                     a JPEG decoded by libjpeg at 1/DENOM (PIL's draft), (H, W, 3)
    eval FILE RESIZE SIZE                torchvision's Resize(RESIZE) + CenterCrop(SIZE) on the PIL
                                         image, as 3 planes (R, G, B) of SIZE x SIZE
    crop FILE TOP LEFT H W SIZE FLIP     torchvision's resized_crop(TOP, LEFT, H, W, SIZE) then,
                                         if FLIP is 1, hflip: 3 planes of SIZE x SIZE
    gray FILE W H                        Image.open(FILE).convert("L").resize((W, H), BILINEAR):
                                         H x W bytes (dtrain predict's pictures for an idx run)
    stretch FILE W H                     Image.open(FILE).convert("RGB").resize((W, H), BILINEAR)
                                         as 3 planes of H x W (the pictures for a cifar run)
Every resize is PIL's Image.resize(..., BILINEAR), as torchvision's transforms call it on PIL images.
"""
import random
import sys

from PIL import Image, ImageFilter


def planes(img):
    return b"".join(band.tobytes() for band in img.split())


def tv_resize_center_crop(img, resize, size):
    # torchvision.transforms.functional: _compute_resized_output_size, resize, center_crop
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = resize, int(resize * long / short)
    nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.BILINEAR)
    top = int(round((nh - size) / 2.0))
    left = int(round((nw - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def tv_resized_crop(img, top, left, h, w, size, flip):
    img = img.crop((left, top, left + w, top + h))
    if img.size != (size, size):
        img = img.resize((size, size), Image.BILINEAR)
    if flip:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


def smooth_noise(rng, w, h):
    img = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    return img.filter(ImageFilter.GaussianBlur(1.2))


def make(out):
    rng = random.Random(1234)
    rgb = smooth_noise(rng, 97, 61)
    big = smooth_noise(rng, 403, 301)
    alpha = Image.frombytes("L", rgb.size, rng.randbytes(97 * 61))
    rgba = rgb.copy()
    rgba.putalpha(alpha)
    gray = rgb.convert("L")
    la = gray.copy()
    la.putalpha(alpha)
    palette = rgb.quantize(colors=37)
    palette.info["transparency"] = 3
    images = {
        "rgb.png": (rgb, {}),
        "rgba.png": (rgba, {}),
        "gray.png": (gray, {}),
        "la.png": (la, {}),
        "palette.png": (palette, {"transparency": 3}),
        "bit1.png": (gray.convert("1"), {}),
        "big.png": (big, {}),
        "rgb.jpg": (rgb, {"quality": 90}),
        "rgb444.jpg": (rgb, {"quality": 95, "subsampling": 0}),
        "gray.jpg": (gray, {"quality": 90}),
        "cmyk.jpg": (rgb.convert("CMYK"), {"quality": 90}),
        "progressive.jpg": (rgb, {"quality": 85, "progressive": True}),
        "big.jpg": (big, {"quality": 90}),
    }
    for name, (img, opts) in images.items():
        img.save(f"{out}/{name}", **opts)
        with Image.open(f"{out}/{name}") as back:
            decoded = back.convert("RGB")
        open(f"{out}/{name}.rgb", "wb").write(decoded.tobytes())
        print(name, decoded.size[0], decoded.size[1])
    # 16-bit grey: PIL opens it as mode I and clips when converting; dtrain keeps the high byte.
    values = [rng.randrange(65536) for _ in range(23 * 17)]
    g16 = Image.new("I;16", (23, 17))
    g16.frombytes(b"".join(v.to_bytes(2, "little") for v in values), "raw", "I;16")
    g16.save(f"{out}/gray16.png")
    open(f"{out}/gray16.png.rgb", "wb").write(bytes(b for v in values for b in (v >> 8,) * 3))
    print("gray16.png", 23, 17)


def run(jobs):
    for line in open(jobs):
        parts = line.split()
        if not parts:
            continue
        out, op, path, args = parts[0], parts[1], parts[2], [int(a) for a in parts[3:]]
        with Image.open(path) as img:
            if op == "gray":
                data = img.convert("L").resize((args[0], args[1]), Image.BILINEAR).tobytes()
            elif op == "stretch":
                data = planes(img.convert("RGB").resize((args[0], args[1]), Image.BILINEAR))
            elif op == "draft":
                denom = args[0]
                img.draft("RGB", (img.size[0] // denom, img.size[1] // denom))
                data = img.convert("RGB").tobytes()
            else:
                rgb = img.convert("RGB")
                if op == "decode":
                    data = rgb.tobytes()
                elif op == "eval":
                    data = planes(tv_resize_center_crop(rgb, args[0], args[1]))
                elif op == "crop":
                    data = planes(tv_resized_crop(rgb, *args[:5], args[5] == 1))
                else:
                    sys.exit(f"unknown op {op}")
        open(out, "wb").write(data)


if __name__ == "__main__":
    {"make": make, "run": run}[sys.argv[1]](sys.argv[2])
