"""What the e2e scripts' PyTorch checks share (imported from their Python heredocs, with
tests/e2e on sys.path): a dtrain run's final evaluation against PyTorch's own numbers."""
import json

import torch.nn.functional as F


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
