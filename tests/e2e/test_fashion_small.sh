#!/usr/bin/env bash
# e2e: a short Fashion-MNIST run of the CLI on 2 MPI ranks (configs/fashion_mnist.yaml, made small
# by overrides). Checks the final accuracy line, the accuracy itself, the run directory
# (config.yaml that re-parses to the same config, metrics.jsonl with one JSON object per line),
# and that PyTorch alone, from model.pt, preprocess.json and the raw IDX test files, gives the
# run's final test accuracy and loss. dtrain eval on 1 rank gives the run's accuracy, and the same
# numbers with the train files absent (the statistics come from preprocess.json).
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON; DTRAIN_FASHION_MNIST overrides the data folder.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup fashion
e2e_fashion_mnist

name=fashion_small
run 300 train "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/fashion_mnist.yaml" \
  run.name=$name run.dir="$tmp/runs" run.timeout_s=120 data.path="$data" \
  train.epochs=1 train.max_steps=200 model.channels=8,16 model.fc=64
[[ $rc == 0 ]] || { show train; fail "training exited with code $rc"; }
cat "$tmp/train.out" | grep -v '^  ' || true

grep -q "world 2 rank(s)" "$tmp/train.out" || { show train; fail "the log does not say 'world 2 rank(s)'"; }
line=$(grep -E '^final test accuracy: [0-9.]+%' "$tmp/train.out" | tail -n 1) ||
  { show train; fail "no 'final test accuracy: NN.NN%' line on stdout"; }
acc=$(sed -E 's/^final test accuracy: ([0-9.]+)%.*/\1/' <<<"$line")
awk -v a="$acc" 'BEGIN { exit !(a > 70.0) }' || fail "final test accuracy $acc% is not above 70%"
echo "ok: final test accuracy $acc% (> 70%)"

run_dir=$tmp/runs/$name
[[ -s $run_dir/config.yaml ]] || fail "missing $run_dir/config.yaml"
[[ -s $run_dir/metrics.jsonl ]] || fail "missing or empty $run_dir/metrics.jsonl"

# The saved config must load again and resolve to the same settings.
run 60 reload "$bin" "$run_dir/config.yaml" --print-config
[[ $rc == 0 ]] || { show reload; fail "dtrain cannot load its own $run_dir/config.yaml (exit $rc)"; }
diff <(grep -v '^#' "$run_dir/config.yaml") \
     <(sed -n '/^run:$/,/^# resolved/p' "$tmp/reload.out" | grep -v '^#') >"$tmp/diff" ||
  { cat "$tmp/diff" >&2; fail "config.yaml does not re-parse to the same config"; }
grep -q "max_steps: 200" "$run_dir/config.yaml" || fail "config.yaml does not hold the override train.max_steps=200"

# metrics.jsonl: every line one JSON object; an eval record whose accuracy matches the log.
py=${DTRAIN_REF_PYTHON:-}
[[ -n $py && -x $py ]] || py=$(command -v python3 || true)
if [[ -n $py ]] && "$py" -c 'import json' 2>/dev/null; then
  "$py" - "$run_dir/metrics.jsonl" "$acc" <<'PY' || fail "metrics.jsonl check failed"
import json, sys
path, acc = sys.argv[1], float(sys.argv[2])
recs = []
with open(path) as f:
    for i, line in enumerate(f, 1):
        try:
            r = json.loads(line)
        except ValueError as e:
            sys.exit(f"{path}:{i}: not JSON ({e}): {line!r}")
        if not isinstance(r, dict) or "type" not in r:
            sys.exit(f"{path}:{i}: not an object with a 'type': {line!r}")
        recs.append(r)
train = [r for r in recs if r["type"] == "train"]
evals = [r for r in recs if r["type"] == "eval"]
if not train or not evals:
    sys.exit(f"{path}: expected train and eval records, got types {[r['type'] for r in recs]}")
last = evals[-1]
if last.get("step") != 200:
    sys.exit(f"{path}: last eval at step {last.get('step')}, expected 200")
if abs(100 * last["test_accuracy"] - acc) > 0.01:
    sys.exit(f"{path}: eval accuracy {last['test_accuracy']} != logged {acc}%")
print(f"ok: {path}: {len(recs)} JSON records ({len(train)} train, {len(evals)} eval)")
PY
else
  # No Python: a line-shape check only.
  if grep -vqE '^\{.*\}$' "$run_dir/metrics.jsonl"; then fail "metrics.jsonl has a line that is not a JSON object"; fi
  grep -q '"type":"eval"' "$run_dir/metrics.jsonl" || fail "metrics.jsonl has no eval record"
  echo "ok: metrics.jsonl lines look like JSON objects (no python3 to parse them)"
fi

# PyTorch alone reproduces the final evaluation from the raw IDX test files: the pixels
# standardized as preprocess.json says (python/dtrain_inputs.py), the twin Cnn loaded from model.pt.
e2e_torch_python
# The twin comes from the run folder (dtrain_models.from_run: config.yaml's model.channels and
# model.fc, preprocess.json's shape and classes), imported through PYTHONPATH as the docs say.
PYTHONPATH="$src/python:$src/tests/e2e" "$py" - "$data" "$run_dir" <<'PY' || fail "preprocess.json and model.pt do not reproduce the run's evaluation"
import sys
import torch, dtrain_inputs, dtrain_models, reference
data, rundir = sys.argv[1], sys.argv[2]
pre = dtrain_inputs.load(rundir)
assert pre["format"] == "idx" and pre["input_shape"] == [1, 28, 28] and len(pre["pixels"]["mean"]) == 1, pre
x, y = reference.idx_test_split(data)
model = dtrain_models.from_run(rundir)
assert isinstance(model, dtrain_models.Cnn) and [c.out_channels for c in model.convs] == [8, 16], model
assert model.fc.out_features == 64 and not model.training, model
with torch.no_grad():
    out = model(dtrain_inputs.pixels(x, pre))
reference.expect_final_evaluation(rundir, out, y)
PY
echo "ok: PyTorch alone (dtrain_inputs.pixels, dtrain_models.from_run's Cnn) gives the run's final test accuracy and loss"

# dtrain eval on one rank (two intra-op threads) accepts the model the 2 ranks (one thread each)
# trained: the train images' statistics are exact, not summed in float by however many threads.
run 300 eval1 "$bin" eval "$run_dir/config.yaml" run.threads=2
[[ $rc == 0 ]] || { show eval1; fail "dtrain eval on 1 rank refused the 2-rank run's model (exit $rc)"; }
grep -qF "accuracy: $acc%" "$tmp/eval1.out" || { show eval1; fail "dtrain eval on 1 rank does not print the run's accuracy $acc%"; }
echo "ok: dtrain eval on 1 rank gives the 2-rank run's accuracy $acc%"

# dtrain eval takes the train images' statistics from preprocess.json and reads no train file:
# with the test files alone in data.path it gives the same numbers, bit for bit.
mkdir "$tmp/test_only"
for f in "$data"/t10k-*; do ln -s "$f" "$tmp/test_only/"; done
run 300 evalfull "$bin" eval "$run_dir/config.yaml" --json
[[ $rc == 0 ]] || { show evalfull; fail "dtrain eval --json: exit $rc"; }
run 300 evaltest "$bin" eval "$run_dir/config.yaml" --json data.path="$tmp/test_only"
[[ $rc == 0 ]] || { show evaltest; fail "dtrain eval without the train files: exit $rc"; }
cmp -s "$tmp/evalfull.out" "$tmp/evaltest.out" ||
  { cat "$tmp/evalfull.out" "$tmp/evaltest.out" >&2; fail "dtrain eval without the train files gives other numbers"; }
echo "ok: dtrain eval without the train files: $(cat "$tmp/evaltest.out")"
echo "PASS"
