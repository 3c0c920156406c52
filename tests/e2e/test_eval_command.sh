#!/usr/bin/env bash
# e2e: preprocess.json and `dtrain eval`. An MLP trains on CSV rows under mpirun -np 2 and leaves
# model.pt and preprocess.json. In PyTorch (Debian's python3-torch, the twin Mlp of
# python/dtrain_models.py, the standardization of python/dtrain_inputs.py): the file's column means and stds are the train rows' (computed here
# from train.csv), and the raw test rows standardized with them through the twin loaded from
# model.pt give the run's final test loss and accuracy. `dtrain eval` on 2 ranks prints that
# evaluation bit for bit, on 1 rank the same accuracy and the loss within 1e-6, from model.pt
# and from the last checkpoint (which holds a copy of preprocess.json) alike, and leaves every
# file of the run as it was, printing nothing about training (the optimizer, gradients). A config whose
# preprocessing differs, a run without model.pt and a missing checkpoint are errors naming the
# key or the file, exit 1. With train.monitor, checkpoint.keep_best and train.early_stop_patience
# the run keeps its best evaluation's weights in best/ and stops when it no longer improves, at
# the same evaluation when it was stopped and resumed on the way.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup eval_command
e2e_torch_python

"$py" - "$tmp" <<'PY' || fail "could not write the CSV files"
import random, sys
root = sys.argv[1]
rng = random.Random(5)
w = [[rng.gauss(0, 1) for _ in range(3)] for _ in range(4)]
scale = [1.0, 5.0, 0.2, 30.0]  # columns of different scales and offsets: standardization matters
for name, n in (("train", 640), ("test", 200)):
    with open(f"{root}/{name}.csv", "w") as f:
        f.write("id,f1,f2,f3,f4,species\n")
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(4)]
            k = max(range(3), key=lambda c: sum(x[j] * w[j][c] for j in range(4)))
            raw = [x[j] * scale[j] + 10 * j for j in range(4)]
            f.write(f"{i}," + ",".join(f"{v:.5f}" for v in raw) + f",{k}\n")
PY

cat >"$tmp/csv.yaml" <<YAML
run: {name: c, dir: "$tmp/runs", seed: 0, log_every: 5, timeout_s: 120}
model: {name: mlp, hidden: [16]}
data: {format: csv, path: "$tmp", train_files: train.csv, test_files: test.csv, target_columns: species,
       feature_columns: "f1, f2, f3, f4", workers: 0}
train: {epochs: 3, global_batch: 64, optimizer: adamw, lr: 0.01, loss: cross_entropy}
YAML
rundir=$tmp/runs/c

# 1. Training on 2 ranks leaves model.pt and preprocess.json.
run 300 train "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/csv.yaml"
[[ $rc == 0 ]] || { show train; fail "training: exit $rc"; }
[[ -s $rundir/model.pt && -s $rundir/preprocess.json ]] || { show train; fail "no model.pt and preprocess.json in $rundir"; }
echo "ok: training wrote $(ls "$rundir" | tr '\n' ' ')"

# 2. Python alone: the file's statistics are the train rows', and it reproduces the test metrics.
"$py" - "$src/python" "$tmp" "$rundir" <<'PY' || fail "preprocess.json does not reproduce the run in PyTorch"
import csv, math, os, sys
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "..", "tests", "e2e")]
import torch, dtrain_inputs, dtrain_models, reference
root, rundir = sys.argv[2], sys.argv[3]
pre = dtrain_inputs.load(rundir)
assert pre["format"] == "csv" and pre["task"] == "classification" and pre["num_classes"] == 3, pre
assert pre["input_shape"] == [4] and pre["targets"] == ["species"], pre
names = pre["features"]["names"]
assert names == ["f1", "f2", "f3", "f4"], names
def table(name):
    rows = list(csv.DictReader(open(f"{root}/{name}.csv")))
    return [[float(r[c]) for c in names] for r in rows], [int(r["species"]) for r in rows]
xs, _ = table("train")
for j, c in enumerate(names):  # population mean and std of the train rows (read as float32), in double
    col = torch.tensor([r[j] for r in xs], dtype=torch.float32).double().tolist()
    m = sum(col) / len(col)
    s = math.sqrt(sum((v - m) ** 2 for v in col) / len(col))
    assert abs(pre["features"]["mean"][j] - m) <= 1e-9 * max(1, abs(m)), (c, pre["features"]["mean"][j], m)
    assert abs(pre["features"]["std"][j] - s) <= 1e-9 * s, (c, pre["features"]["std"][j], s)
x, y = table("test")
inputs = dtrain_inputs.csv_rows(x, pre)
model = dtrain_models.from_run(rundir)  # config.yaml's model.hidden [16], 4 features, 3 classes
assert isinstance(model, dtrain_models.Mlp) and [l.out_features for l in model.layers] == [16], model
with torch.no_grad():
    out = model(inputs)
acc, _ = reference.expect_final_evaluation(rundir, out, torch.tensor(y), rel=1e-5)
assert acc > 0.8, acc  # it learned: the check above is not one of an untrained model
PY
echo "ok: preprocess.json's statistics are the train rows'; PyTorch reproduces the run's test metrics"

# 3. dtrain eval on 2 and 1 ranks, from model.pt and from the last checkpoint; nothing written.
snapshot() { (cd "$rundir" && find . -type f -exec sha256sum {} + | sort); }
before=$(snapshot)
ckpt=$(ls -d "$rundir"/checkpoints/step-* | sort | tail -n 1)
cmp -s "$ckpt/preprocess.json" "$rundir/preprocess.json" || fail "$ckpt holds no copy of preprocess.json"
grep -q "preprocess.json" "$ckpt/COMPLETE" || fail "$ckpt/COMPLETE does not list preprocess.json"
run 300 eval2 "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" --json
[[ $rc == 0 ]] || { show eval2; fail "eval on 2 ranks: exit $rc"; }
run 300 eval1 "$bin" eval "$tmp/csv.yaml" --json
[[ $rc == 0 ]] || { show eval1; fail "eval on 1 rank: exit $rc"; }
run 300 evalc "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" --json --checkpoint "$ckpt"
[[ $rc == 0 ]] || { show evalc; fail "eval of $ckpt: exit $rc"; }
# --checkpoint a run directory or its checkpoints folder: its newest complete checkpoint.
for given in "$rundir" "$rundir/checkpoints"; do
  run 300 evalr "$bin" eval "$tmp/csv.yaml" --json --checkpoint "$given"
  [[ $rc == 0 ]] || { show evalr; fail "eval --checkpoint $given: exit $rc"; }
  "$py" - "$tmp/evalc.out" "$tmp/evalr.out" <<'PY' || fail "--checkpoint $given is not the newest checkpoint"
import json, sys
c, r = (json.loads(open(p).read()) for p in sys.argv[1:3])
assert r["weights"] == c["weights"] and r["test_count"] == c["test_count"], (r, c)
assert r["test_accuracy"] == c["test_accuracy"], (r, c)
PY
done
echo "ok: --checkpoint $rundir and its checkpoints folder take $(basename "$ckpt")"
# The run directory as the config: its own config.yaml and model.pt, wherever it lies now.
cp -r "$rundir" "$tmp/moved"
run 300 evald "$bin" eval "$tmp/moved" --json
[[ $rc == 0 ]] || { show evald; fail "eval of a run directory: exit $rc"; }
"$py" - "$tmp/eval1.out" "$tmp/evald.out" "$tmp/moved/model.pt" <<'PY' || fail "eval of the run directory is not eval of its model.pt"
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:3])
assert b["weights"] == sys.argv[3], (b["weights"], sys.argv[3])
for k in ("test_loss", "test_accuracy", "test_count"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
rm -rf "$tmp/moved"
echo "ok: dtrain eval RUN_DIR (moved) evaluates its model.pt with its own config"
run 300 evalt "$bin" eval "$tmp/csv.yaml"
[[ $rc == 0 ]] || { show evalt; fail "eval (text): exit $rc"; }
grep -qE "model.pt on 1 rank\(s\): test accuracy: [0-9.]+% \(loss [0-9.]+, 200 samples\)" "$tmp/evalt.out" ||
  { show evalt; fail "eval (text): no result line"; }
[[ $(snapshot) == "$before" ]] || fail "dtrain eval changed files of the run directory"
# Only what matters to evaluation (issue 54, point 3): no lines about the optimizer, the
# gradients' transport, the training's batch arithmetic or its optimizer sharding, on 1 rank and
# on 2 ranks with dist.shard_optimizer.
run 300 evals "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" dist.shard_optimizer=true
[[ $rc == 0 ]] || { show evals; fail "eval with dist.shard_optimizer: exit $rc"; }
for name in evalt evals; do
  ! grep -qiE "optimizer|gradient|all-reduce|bucket|accumulation|global batch|sharded" "$tmp/$name.out" "$tmp/$name.err" ||
    { show $name; fail "$name: dtrain eval printed training facts"; }
  grep -qE "^evaluating .*model.pt: 200 test samples in batches of [0-9]+ per rank on [12] rank\(s\)$" "$tmp/$name.out" ||
    { show $name; fail "$name: no line saying what is evaluated"; }
done
"$py" - "$rundir/metrics.jsonl" "$tmp/eval2.out" "$tmp/eval1.out" "$tmp/evalc.out" <<'PY' || fail "dtrain eval disagrees with the training's evaluation"
import json, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "eval"][-1]
# --json: standard output is the JSON object alone (the log goes to stderr).
two, one, ckpt = (json.loads(open(p).read()) for p in sys.argv[2:5])
for name, r in (("2 ranks", two), ("checkpoint, 2 ranks", ckpt)):
    assert r["world"] == 2, r
    for k in ("test_loss", "test_accuracy", "test_count"):
        assert r[k] == ev[k], (name, k, r[k], ev[k])
assert one["world"] == 1 and one["test_count"] == ev["test_count"], one
assert one["test_accuracy"] == ev["test_accuracy"], ("1 rank", one, ev)
assert abs(one["test_loss"] - ev["test_loss"]) <= 1e-6 * ev["test_loss"], ("1 rank", one, ev)
print("training's final evaluation:", {k: ev[k] for k in ("test_loss", "test_accuracy", "test_count")})
print("dtrain eval, 2 ranks:", two, "\n  1 rank:", one)
PY
echo "ok: dtrain eval gives the training's numbers (2 ranks and the checkpoint: bit for bit; 1 rank: the loss within 1e-6); the run directory is unchanged"

# dtrain eval reads the test file alone (preprocess.json has the statistics): without the train
# file it gives the same numbers.
mv "$tmp/train.csv" "$tmp/train.csv.away"
run 300 evalnotrain "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" --json
mv "$tmp/train.csv.away" "$tmp/train.csv"
[[ $rc == 0 ]] || { show evalnotrain; fail "eval without the train file: exit $rc"; }
"$py" - "$tmp/eval2.out" "$tmp/evalnotrain.out" <<'PY' || fail "dtrain eval without the train file gives other numbers"
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:3])
for k in ("test_loss", "test_accuracy", "test_count"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
echo "ok: dtrain eval without the train file: the same numbers"

# 4. Bad input: each an error naming the key or the file, exit 1.
expect_error() {  # NAME TEXT: exit 1 and TEXT in stderr
  [[ $rc == 1 ]] || { show "$1"; fail "$1: exit $rc, not 1"; }
  grep -qF -- "$2" "$tmp/$1.err" || { show "$1"; fail "$1: the error does not name '$2'"; }
  echo "ok: $1: $(grep -m1 error "$tmp/$1.err")"
}
run 120 nomodel "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" run.name=none
expect_error nomodel "$tmp/runs/none/model.pt"
[[ $(grep -c "error" "$tmp/nomodel.err") == 1 ]] || { show nomodel; fail "nomodel: not one error line"; }
run 120 nockpt "$bin" eval "$tmp/csv.yaml" --checkpoint "$tmp/runs/c/checkpoints/step-nope"
expect_error nockpt "$tmp/runs/c/checkpoints/step-nope"
run 120 noweights "$bin" eval "$tmp/csv.yaml" --weights "$tmp/none.pt"
expect_error noweights "$tmp/none.pt"
run 120 columns "$bin" eval "$tmp/csv.yaml" 'data.feature_columns=f1, f2, f4, f3'
expect_error columns "data.feature_columns"
run 120 unscaled "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" data.normalize=false
expect_error unscaled "data.normalize"
[[ $(snapshot) == "$before" ]] || fail "a failed dtrain eval changed files of the run directory"

# 5. train.monitor: the best evaluation's weights in best/ (checkpoint.keep_best) and early
#    stopping after train.early_stop_patience evaluations without a better test_accuracy. Which
#    evaluation is best, and where the run must stop, follow from metrics.jsonl's own records;
#    dtrain eval of best/model.pt gives that evaluation's numbers bit for bit (2 ranks).
run 300 best "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/csv.yaml" run.name=best train.epochs=40 \
  train.monitor=test_accuracy checkpoint.keep_best=true train.early_stop_patience=3
[[ $rc == 0 ]] || { show best; fail "training with train.monitor: exit $rc"; }
run 300 evalbest "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/csv.yaml" run.name=best --json \
  --weights "$tmp/runs/best/best/model.pt"
[[ $rc == 0 ]] || { show evalbest; fail "dtrain eval of best/model.pt: exit $rc"; }
"$py" - "$tmp/runs/best" "$tmp/best.out" "$tmp/evalbest.out" <<'PY' || { show best; fail "best/ and the early stop do not follow the evaluations"; }
import json, sys
rundir, log, evaljson = sys.argv[1:4]
recs = [json.loads(l) for l in open(f"{rundir}/metrics.jsonl")]
evals = [r for r in recs if r["type"] == "eval"]
best, best_i, stop_at = None, None, None
for i, e in enumerate(evals):
    if best is None or e["test_accuracy"] > best["test_accuracy"]:
        best, best_i = e, i
    elif i - best_i >= 3:
        stop_at = i
        break
assert stop_at is not None, "the accuracy kept improving: no early stop to check"
assert len(evals) == stop_at + 1, (len(evals), stop_at)   # no evaluation after the stop
summary = recs[-1]
assert summary["type"] == "summary" and summary["stopped"] and summary["steps"] < 40 * 10, summary
saved = json.load(open(f"{rundir}/best/best.json"))
evaluation = {"step": best["step"], "test_count": best["test_count"], "test_loss": best["test_loss"],
              "test_accuracy": best["test_accuracy"]}
assert saved == {"metric": "test_accuracy", "value": best["test_accuracy"], "step": best["step"], "epoch": best["epoch"],
                 "evaluation": evaluation}, (saved, best)
got = json.loads(open(evaljson).read())
for k in ("test_loss", "test_accuracy", "test_count"):
    assert got[k] == best[k], (k, got[k], best[k])
# The metric in the progress line's unit (percent), no hook names (issue 54, point 1).
line = "early stop: test_accuracy has not improved on its best, %.2f%% at step %d, for 3 evaluations in a row" % (100 * best["test_accuracy"], best["step"])
text = open(log).read()
assert line in text, line
assert "hook" not in text and "evaluation(s)" not in text, "hook jargon in the log"
print(f"best test_accuracy {best['test_accuracy']} at step {best['step']}; stopped after evaluation {stop_at + 1} of {len(evals)}")
PY
echo "ok: train.monitor: best/ holds the best evaluation's weights (dtrain eval gives its numbers), the run stopped 3 evaluations after it"

# 6. The same run stopped after two evaluations without a better one (train.max_steps at that
#    epoch's end) and resumed (train.max_steps=0) stops at the same evaluation as the run above:
#    the checkpoint carries the best value and the count of evaluations since (best_model's state).
halt=$("$py" - "$tmp/runs/best" <<'PY'
import json, sys
evals = [r for r in map(json.loads, open(f"{sys.argv[1]}/metrics.jsonl")) if r["type"] == "eval"]
best_i = max(range(len(evals)), key=lambda i: (evals[i]["test_accuracy"], -i))
print(evals[best_i + 2]["step"])
PY
) || fail "no evaluation 2 after the best one"
run 300 half "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/csv.yaml" run.name=best2 train.epochs=40 \
  train.monitor=test_accuracy checkpoint.keep_best=true train.early_stop_patience=3 train.max_steps=$halt
[[ $rc == 0 ]] || { show half; fail "the run to step $halt: exit $rc"; }
run 300 rest "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/csv.yaml" run.name=best2 train.epochs=40 \
  train.monitor=test_accuracy checkpoint.keep_best=true train.early_stop_patience=3 train.max_steps=0
[[ $rc == 0 ]] || { show rest; fail "the resumed run: exit $rc"; }
grep -q "train.monitor from the checkpoint: best test_accuracy [0-9.]*% at step [0-9]*, 2 evaluations since without a better one" \
  "$tmp/rest.out" || { show rest; fail "the resumed run does not say it took train.monitor's state from the checkpoint"; }
"$py" - "$tmp/runs/best" "$tmp/runs/best2" <<'PY' || { show rest; fail "the resumed run did not stop where the uninterrupted one did"; }
import json, sys
def records(d):
    return [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
one, two = records(sys.argv[1]), records(sys.argv[2])
e1 = [(r["step"], r["test_accuracy"]) for r in one if r["type"] == "eval"]
e2 = [(r["step"], r["test_accuracy"]) for r in two if r["type"] == "eval"]
assert e1 == e2, (e1, e2)
s1, s2 = one[-1], two[-1]
assert s2["type"] == "summary" and s2["stopped"] and s2["steps"] == s1["steps"], (s1, s2)
assert json.load(open(f"{sys.argv[1]}/best/best.json")) == json.load(open(f"{sys.argv[2]}/best/best.json"))
print(f"stopped and resumed: early stop after step {s2['steps']}, as the uninterrupted run")
PY
echo "ok: a run stopped 2 evaluations after its best and resumed stops at the uninterrupted run's evaluation"
echo "PASS"
