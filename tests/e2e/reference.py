"""What the e2e scripts' PyTorch checks share (imported from their Python heredocs, with
tests/e2e on sys.path): a dtrain run's final evaluation against PyTorch's own numbers."""
import gzip
import json
import os

import torch
import torch.nn.functional as F


def idx_test_split(folder):
    """The Fashion-MNIST (IDX) test images (N, 1, 28, 28) uint8 and labels (N,) int64 in
    `folder`, gzipped or not, as the files hold them."""
    def idx(name, header):
        path = os.path.join(folder, name)
        raw = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
        return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8)
    return idx("t10k-images-idx3-ubyte", 16).view(-1, 1, 28, 28), idx("t10k-labels-idx1-ubyte", 8).long()


def expect_final_evaluation(rundir, logits, labels, rel=1e-6):
    """The last eval record of rundir/metrics.jsonl against the cross-entropy (mean over samples)
    and accuracy of `logits` for `labels`: the same count, the same accuracy, the loss within
    `rel`. Prints both; returns PyTorch's (accuracy, loss)."""
    loss = F.cross_entropy(logits, labels).item()
    acc = (logits.argmax(1) == labels).sum().item() / len(labels)
    with open(f"{rundir}/metrics.jsonl") as f:
        ev = [r for r in map(json.loads, f) if r["type"] == "eval"][-1]
    print(f"PyTorch from preprocess.json: accuracy {acc:.4f} loss {loss:.9f}; the run's "
          f"{ev['test_accuracy']:.4f} {ev['test_loss']:.9f} ({len(labels)} samples)")
    assert ev["test_count"] == len(labels), ev
    assert ev["test_accuracy"] == acc, (ev["test_accuracy"], acc)
    assert abs(ev["test_loss"] - loss) <= rel * loss, (ev["test_loss"], loss)
    return acc, loss
