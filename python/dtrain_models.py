"""The PyTorch twins of dtrain's built-in models: the same layers, the same forward pass, and the
same state_dict names as the model.pt files that dtrain writes (and model.init_weights reads).

    import dtrain_models
    model = dtrain_models.from_run("runs/fashion_mnist")   # the twin, model.pt loaded, eval mode

from_run() builds the twin from the run folder's config.yaml (model.*) and preprocess.json (the
input shape, the classes or regression targets) and loads its model.pt (weights=False: the
twin's own initialization; weights="path": another file, e.g. a checkpoint's model.pt). By
hand, with the run's values:

    import torch, dtrain_models
    model = dtrain_models.Cnn(in_shape=(1, 28, 28), channels=(16, 32), fc=128, classes=10)
    model.load_state_dict(torch.load("runs/fashion_mnist/model.pt"))

and the other way:

    torch.save(model.state_dict(), "start.pt")   # then: dtrain x.yaml model.init_weights=start.pt

Each class takes the model.* keys of dtrain's config (and the data's shape and classes). Only
torch is needed (no torchvision). Python finds this file with PYTHONPATH naming the folder:
`PYTHONPATH=/path/to/dtrain/python python3 my_script.py`.

  dtrain model   twin                                    state_dict names
  linear         Linear(in_features, out)                fc
  mlp            Mlp(in_features, hidden, out)           layers.{i}, head
  cnn            Cnn(in_shape, channels, fc, classes,    convs.{i}, norms.{i} (batch_norm), fc,
                     dropout, batch_norm)                head
  gpt            GPT(vocab_size, seq_len, n_layer, ...)  nanoGPT's: transformer.{wte, wpe, h.{i},
                                                         ln_f}, lm_head (tied to transformer.wte)
  resnet18/50    resnet18(...), resnet50(...)            torchvision's: conv1, bn1, layer{1..4},
                                                         fc (BatchNorm buffers included)

Inputs: linear and mlp flatten (N, ...) samples; cnn and resnet take (N, C, H, W) images; gpt
takes (B, T) int64 token ids and returns (B, T, vocab) logits (all positions).
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Linear(nn.Module):
    """dtrain's "linear": one affine map on flattened inputs."""

    def __init__(self, in_features, out):
        super().__init__()
        self.fc = nn.Linear(in_features, out)

    def forward(self, x):
        return self.fc(x.flatten(1))


class Mlp(nn.Module):
    """dtrain's "mlp": Linear + ReLU (+ dropout) per width in model.hidden, then a head."""

    def __init__(self, in_features, hidden=(256,), out=10, dropout=0.0):
        super().__init__()
        widths = [in_features] + list(hidden)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.head = nn.Linear(widths[-1], out)
        self.dropout = dropout

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.layers:
            x = F.dropout(F.relu(layer(x)), self.dropout, self.training)
        return self.head(x)


class Cnn(nn.Module):
    """dtrain's "cnn": per model.channels a 5x5 conv (padding 2), [BatchNorm2d (model.batch_norm;
    the conv then has no bias),] ReLU and 2x2 max-pool; then Linear(.., fc), ReLU (+ dropout),
    Linear(fc, classes)."""

    def __init__(self, in_shape=(1, 28, 28), channels=(16, 32), fc=128, classes=10, dropout=0.0,
                 batch_norm=False):
        super().__init__()
        c, h, w = in_shape
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for out in channels:
            self.convs.append(nn.Conv2d(c, out, 5, padding=2, bias=not batch_norm))
            if batch_norm:
                self.norms.append(nn.BatchNorm2d(out))
            c, h, w = out, h // 2, w // 2
        self.fc = nn.Linear(c * h * w, fc)
        self.head = nn.Linear(fc, classes)
        self.dropout = dropout

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if len(self.norms):
                x = self.norms[i](x)
            x = F.max_pool2d(F.relu(x), 2)
        x = F.dropout(F.relu(self.fc(x.flatten(1))), self.dropout, self.training)
        return self.head(x)


# ---- gpt: nanoGPT's GPT-2 (biases on, GELU with the tanh approximation, as dtrain) ----------

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.dropout = dropout

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = F.dropout(att.masked_fill(future, float("-inf")).softmax(-1), self.dropout,
                        self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = dropout

    def forward(self, x):
        x = self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
        return F.dropout(x, self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """dtrain's "gpt" with nanoGPT's names; lm_head shares its weight with transformer.wte."""

    def __init__(self, vocab_size=50304, seq_len=1024, n_layer=12, n_head=12, n_embd=768,
                 dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(seq_len, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer)),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as in nanoGPT and dtrain

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# ---- resnet18 / resnet50: torchvision's ResNet (v1.5), written out --------------------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, block, layers, in_channels=3, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.inplanes = 64
        for s, (planes, n) in enumerate(zip((64, 128, 256, 512), layers)):
            setattr(self, "layer%d" % (s + 1), self._stage(block, planes, n, 1 if s == 0 else 2))
        self.fc = nn.Linear(512 * block.expansion, classes)

    def _stage(self, block, planes, n, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        blocks = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        blocks += [block(self.inplanes, planes) for _ in range(1, n)]
        return nn.Sequential(*blocks)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for s in range(1, 5):
            x = getattr(self, "layer%d" % s)(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18(in_channels=3, classes=1000):
    return ResNet(BasicBlock, (2, 2, 2, 2), in_channels, classes)


def resnet50(in_channels=3, classes=1000):
    return ResNet(Bottleneck, (3, 4, 6, 3), in_channels, classes)


# ---- a run folder's twin ----------------------------------------------------------------------

def _model_keys(config_yaml):
    """The model section of a run's config.yaml (as dtrain writes it: "key: value" lines, flow
    lists, JSON-like scalars) as a dict."""
    keys, inside = {}, False
    with open(config_yaml) as f:
        for line in f:
            if not line.startswith(" "):
                inside = line.strip() == "model:"
                continue
            if inside and ":" in line:
                key, value = line.strip().split(":", 1)
                value = value.strip()
                try:
                    keys[key] = json.loads(value)
                except ValueError:
                    keys[key] = {"true": True, "false": False}.get(value, value)
    if not keys:
        raise ValueError(f"{config_yaml}: no model section (not a dtrain run's config.yaml?)")
    return keys


def from_run(run_dir, weights=True):
    """The twin of the model a dtrain run trained, built from run_dir's config.yaml and
    preprocess.json; with weights=True its model.pt loaded (a path: that file; False: none),
    in eval mode."""
    m = _model_keys(os.path.join(run_dir, "config.yaml"))
    with open(os.path.join(run_dir, "preprocess.json")) as f:
        pre = json.load(f)
    shape = pre["input_shape"]
    out = pre.get("num_classes") or pre.get("target_dim")
    name, dropout = m["name"], m.get("dropout", 0.0)
    if name == "linear":
        model = Linear(math.prod(shape), out)
    elif name == "mlp":
        model = Mlp(math.prod(shape), m["hidden"], out, dropout)
    elif name == "cnn":
        model = Cnn(tuple(shape), m["channels"], m["fc"], out, dropout, m.get("batch_norm", False))
    elif name == "gpt":
        model = GPT(m["vocab_size"], m["seq_len"], m["n_layer"], m["n_head"], m["n_embd"], dropout)
    elif name in ("resnet18", "resnet50"):
        model = (resnet18 if name == "resnet18" else resnet50)(shape[0], out)
    elif name == "torchscript":
        model = torch.jit.load(m["path"])
    else:
        raise ValueError(f"{run_dir}: model.name {name!r} has no twin here (a model registered in C++: "
                         "build its PyTorch module yourself)")
    if weights:
        path = os.path.join(run_dir, "model.pt") if weights is True else weights
        model.load_state_dict(torch.load(path))
    return model.eval()

