#!/usr/bin/env python3
"""Reads a dtrain run's TensorBoard folder with the `tensorboard` package's own reader
(EventAccumulator), as TensorBoard itself would, and prints every scalar tag with its number of
points, first and last step and last value.

Usage: check_tensorboard.py RUN_DIR [TAG...]
  RUN_DIR: the run directory (runs/<name>) or its tensorboard/ folder.
  TAG:     tags that must be there besides 'loss' (e.g. mfu tokens_per_s gpu/utilization).
Exit status: 0 when every required tag has points; 1 when 'loss' or another required tag is
missing or the folder holds no events; 2 when the tensorboard package is not installed.
"""
import os
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        print("check_tensorboard: the tensorboard package is missing (pip install tensorboard): %s" % e,
              file=sys.stderr)
        return 2
    folder = argv[1]
    if os.path.isdir(os.path.join(folder, "tensorboard")):
        folder = os.path.join(folder, "tensorboard")
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags().get("scalars", []))
    print("%s: %d scalar tags" % (folder, len(tags)))
    for tag in tags:
        points = acc.Scalars(tag)
        print("  %-22s %5d points, steps %d..%d, last %.6g" %
              (tag, len(points), points[0].step, points[-1].step, points[-1].value))
    missing = [t for t in ["loss"] + argv[2:] if t not in tags or not acc.Scalars(t)]
    if missing:
        print("check_tensorboard: missing tags: %s" % ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
