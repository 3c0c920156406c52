#!/usr/bin/env bash
# e2e: the run's records. A short CPU training writes TensorBoard event files whose loss scalars
# are metrics.jsonl's train losses at the same steps (as float32), read back by
# tests/unit/read_tfevents.py (Python's standard library only, CRCs checked), plus the
# evaluations; metrics.jsonl has time and step in every record and ends with a summary; a
# 2-rank run writes one event file (rank 0's); a GPT run records tokens/s = samples/s × T; and
# run.tensorboard=false writes no event files.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup tensorboard
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}
reader=$src/tests/unit/read_tfevents.py

printf 'run:\n  name: tb\n' >"$tmp/tb.yaml"
# 512 samples / 32 = 16 steps per epoch, 2 epochs: loss reads at steps 3, 6, ..., 15, 16 (an
# epoch's end), 18, ..., 30, 32 (the run's end).
mlp=(run.dir="$tmp/runs" run.log_every=3 run.threads=1 data.format=synthetic
  data.synthetic_task=classification data.synthetic_classes=4 data.synthetic_size=512
  data.synthetic_test_size=128 data.workers=0 model.name=mlp model.hidden=16
  train.loss=cross_entropy train.optimizer=sgd train.lr=0.1 train.global_batch=32 train.epochs=2)

# check_run DIR EXPECTED_STEPS: the event files against metrics.jsonl.
check_run() {
  "$py" - "$reader" "$1" "$2" <<'PY' || fail "$1: TensorBoard events do not match metrics.jsonl"
import json, os, struct, subprocess, sys
reader, run_dir, want_steps = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
out = subprocess.run([sys.executable, reader, run_dir + "/tensorboard"], capture_output=True, text=True)
if out.returncode != 0:
    sys.exit("read_tfevents: " + out.stderr)
events = [json.loads(l) for l in out.stdout.splitlines()]
files = sorted(os.listdir(run_dir + "/tensorboard"))
if len(files) != 1 or not files[0].startswith("events.out.tfevents."):
    sys.exit("expected one event file, found %s" % files)
if events[0].get("file_version") != "brain.Event:2":
    sys.exit("the first event is not the file version: %s" % events[0])
records = [json.loads(l) for l in open(run_dir + "/metrics.jsonl")]
for r in records:
    if "time" not in r or "step" not in r:
        sys.exit("a record without time or step: %s" % r)
if records[-1]["type"] != "summary" or sum(r["type"] == "summary" for r in records) != 1:
    sys.exit("metrics.jsonl does not end with its one summary record")
train = [r for r in records if r["type"] == "train"]
if [r["step"] for r in train] != want_steps:
    sys.exit("train records at steps %s, expected %s" % ([r["step"] for r in train], want_steps))
tb_loss = [(e["step"], e["values"]["loss"]) for e in events if "loss" in e.get("values", {})]
if [s for s, _ in tb_loss] != want_steps:
    sys.exit("loss scalars at steps %s, expected %s" % ([s for s, _ in tb_loss], want_steps))
for (step, v), r in zip(tb_loss, train):
    if v != f32(r["loss"]):
        sys.exit("step %d: TensorBoard loss %r, metrics.jsonl %r" % (step, v, r["loss"]))
for e, r in zip([e for e in events if "loss" in e.get("values", {})], train):
    if abs(e["wall_time"] - r["time"]) > 1e-6:
        sys.exit("step %d: event time %r, record time %r" % (r["step"], e["wall_time"], r["time"]))
    vals = e["values"]
    for tag in ("lr", "samples_per_s", "phase/data", "phase/compute", "phase/comm", "phase/optimizer", "grad_norm"):
        if tag not in vals:
            sys.exit("step %d: no %s scalar (tags: %s)" % (r["step"], tag, sorted(vals)))
    if vals["samples_per_s"] != f32(r["samples_per_s"]) or vals["grad_norm"] != f32(r["grad_norm"]):
        sys.exit("step %d: samples/s or grad norm differ from metrics.jsonl" % r["step"])
    w = [r["window_" + k + "_s"] for k in ("data", "compute", "comm", "optimizer")]
    if abs(vals["phase/compute"] - w[1] / sum(w)) > 1e-6:
        sys.exit("step %d: phase/compute %r is not the window's share %r" % (r["step"], vals["phase/compute"], w[1] / sum(w)))
evals = [r for r in records if r["type"] == "eval"]
tb_eval = [(e["step"], e["values"]) for e in events if "eval/loss" in e.get("values", {})]
if [s for s, _ in tb_eval] != [r["step"] for r in evals] or len(evals) != 2:
    sys.exit("eval scalars at %s, eval records at %s" % ([s for s, _ in tb_eval], [r["step"] for r in evals]))
for (s, v), r in zip(tb_eval, evals):
    if v["eval/loss"] != f32(r["test_loss"]) or v["eval/accuracy"] != f32(r["test_accuracy"]):
        sys.exit("step %d: eval scalars %s, record %s" % (s, v, r))
print("ok: %d loss scalars equal to metrics.jsonl, %d evaluations" % (len(tb_loss), len(tb_eval)))
PY
}
steps=3,6,9,12,15,16,18,21,24,27,30,32

run 300 one "$bin" "$tmp/tb.yaml" "${mlp[@]}"
expect_ok one
check_run "$tmp/runs/tb" "$steps"

run 300 two "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/tb.yaml" "${mlp[@]}" run.name=tb2
expect_ok two
check_run "$tmp/runs/tb2" "$steps"
echo "ok: 2 ranks write one event file (rank 0's)"

# A sequence model: tokens/s = samples/s × tokens per sample; no MFU on a CPU (no peak known).
run 300 gpt "$bin" "$tmp/tb.yaml" run.dir="$tmp/runs" run.name=gpt run.log_every=2 run.threads=1 \
  model.name=gpt model.n_layer=1 model.n_head=2 model.n_embd=16 model.vocab_size=32 \
  model.seq_len=8 data.format=synthetic data.synthetic_task=tokens data.synthetic_shape=8 \
  data.synthetic_classes=32 data.synthetic_size=64 data.synthetic_test_size=16 data.workers=0 \
  train.epochs=1 train.global_batch=16 train.optimizer=adamw train.lr=1e-3
expect_ok gpt
"$py" - "$tmp/runs/gpt/metrics.jsonl" <<'PY' || fail "gpt: tokens/s in metrics.jsonl"
import json, sys
train = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
if not train:
    sys.exit("no train records")
for r in train:
    if abs(r["tokens_per_s"] - 8 * r["samples_per_s"]) > 1e-9 * r["tokens_per_s"]:
        sys.exit("tokens_per_s %r is not 8 x samples_per_s %r" % (r["tokens_per_s"], r["samples_per_s"]))
    if "mfu" in r:
        sys.exit("an MFU without a known peak: %s" % r)
print("ok: gpt records tokens/s = 8 x samples/s in %d records, no MFU on a CPU" % len(train))
PY

run 300 off "$bin" "$tmp/tb.yaml" "${mlp[@]}" run.name=off run.tensorboard=false
expect_ok off
[[ ! -e $tmp/runs/off/tensorboard ]] || fail "run.tensorboard=false wrote $tmp/runs/off/tensorboard"
[[ -s $tmp/runs/off/metrics.jsonl ]] || fail "run.tensorboard=false: no metrics.jsonl"
echo "ok: run.tensorboard=false writes no event files"
echo "PASS"
