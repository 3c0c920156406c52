"""A dtrain run's preprocessing in Python: the inputs of the model twins (dtrain_models.py) made
from raw data as the run made them, read from the preprocess.json that dtrain writes beside
model.pt (docs/OBSERVABILITY.md lists its fields).

    import dtrain_models, dtrain_inputs                       # PYTHONPATH=/path/to/dtrain/python
    pre = dtrain_inputs.load("runs/x")                       # or "runs/x/preprocess.json"
    model = dtrain_models.from_run("runs/x")                 # the twin, model.pt loaded, eval mode
    probs = model(dtrain_inputs.image_files(["cat.jpg"], pre)).softmax(1)
    names = [pre["class_names"][i] for i in probs.argmax(1).tolist()]

  image_files(paths, pre)   image files (any PIL opens) as dtrain predict prepares them: image
                            folders, the evaluation transform (torchvision's Resize of the
                            shorter side with PIL's bilinear filter, then CenterCrop); idx and
                            cifar runs, convert("L") or ("RGB") as the run's channels, then the
                            whole picture resized to the run's size, resize((W, H), BILINEAR);
                            then the pixels standardized; needs PIL (Debian's python3-pil)
  pixels(x, pre)            uint8 images (N, C, H, W) as stored (IDX, CIFAR, image folders after
                            their transform): (x / scale - mean[c]) / std[c]
  csv_rows(rows, pre)       CSV rows (dicts by column name, as csv.DictReader gives them, or lists
                            in the order of pre["features"]["names"]): each value read as float32,
                            then (x - mean[j]) / std[j] in double, as dtrain does

Each returns a float32 tensor, one row per input, in the order given. Only torch is needed (and
PIL for image files).
"""
import json
import os

import torch


def load(path):
    """preprocess.json as a dict, from its path or from the folder that holds it."""
    if os.path.isdir(path):
        path = os.path.join(path, "preprocess.json")
    with open(path) as f:
        return json.load(f)


def _field(pre, name, what):
    if not pre.get(name):
        raise ValueError(f"preprocess.json has no '{name}' (format {pre.get('format')!r}): "
                         f"{what} apply to other formats")
    return pre[name]


def pixels(x, pre):
    """(N, C, H, W) uint8 (or 0..255 values of any dtype) standardized per channel."""
    px = _field(pre, "pixels", "pixels()")
    channels = x.shape[1]
    mean = torch.tensor(px["mean"], dtype=torch.float32).view(1, channels, 1, 1)
    std = torch.tensor(px["std"], dtype=torch.float32).view(1, channels, 1, 1)
    return (x.to(torch.float32) / px["scale"] - mean) / std


def image_files(paths, pre):
    """The image files as dtrain predict prepares them for the run: (N, C, H, W) float32."""
    from PIL import Image  # image files only

    if pre["format"] not in ("image_folder", "idx", "cifar10", "cifar100"):
        raise ValueError(f"preprocess.json's format {pre['format']!r}: image_files() applies to "
                         f"image_folder, idx, cifar10 and cifar100 runs")
    c, h, w = pre["input_shape"]
    mode = "RGB" if c == 3 else "L"
    out = []
    for path in paths:
        with Image.open(path) as image:
            im = image.convert(mode)
        if pre["format"] == "image_folder":
            t = _field(pre, "eval_transform", "image_files()")
            r, s = t["resize"], t["center_crop"]
            iw, ih = im.size  # torchvision's Resize(r): the shorter side to r, the longer in proportion
            im = im.resize((r, int(r * ih / iw)) if iw <= ih else (int(r * iw / ih), r), Image.BILINEAR)
            left, top = int(round((im.size[0] - s) / 2.0)), int(round((im.size[1] - s) / 2.0))
            im = im.crop((left, top, left + s, top + s))
        elif im.size != (w, h):  # idx, cifar: the whole picture to the run's size
            im = im.resize((w, h), Image.BILINEAR)
        x = torch.tensor(list(im.getdata()), dtype=torch.uint8).view(h, w, -1).permute(2, 0, 1)
        out.append(x)
    return pixels(torch.stack(out), pre)


def csv_rows(rows, pre):
    """CSV rows standardized with the train rows' statistics: (N, features) float32."""
    f = _field(pre, "features", "csv_rows()")
    names = f["names"]
    values = [[float(r[c]) for c in names] if isinstance(r, dict) else [float(v) for v in r] for r in rows]
    x = torch.tensor(values, dtype=torch.float32).double()
    if f.get("mean") is None:  # data.normalize: false
        return x.float()
    mean = torch.tensor(f["mean"], dtype=torch.float64)
    std = torch.tensor(f["std"], dtype=torch.float64)
    return ((x - mean) / std).float()
