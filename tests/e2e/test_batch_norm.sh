#!/usr/bin/env bash
# e2e: BatchNorm on N ranks (Note [BatchNorm on N ranks]). The cnn with model.batch_norm trains
# on Fashion-MNIST under mpirun -np 2, once with each rank's own statistics (the running
# statistics averaged over the ranks before each evaluation and save) and once with
# model.sync_batch_norm. For each: the run's final evaluation (metrics.jsonl, and its
# "final test accuracy" line) is the evaluation of the model.pt it wrote: `dtrain eval` of that
# file on 2 ranks gives it bit for bit, on 1 rank the same accuracy and the loss within 1e-6, and
# PyTorch alone (the twin Cnn with BatchNorm2d from model.pt, python/dtrain_models.py) gives it
# too; the last checkpoint's state.pt holds the same running statistics. model.sync_batch_norm on
# a model without BatchNorm is an error naming the key, exit 1.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON; DTRAIN_FASHION_MNIST overrides the data folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup batch_norm
e2e_torch_python
e2e_fashion_mnist

common=(run.dir="$tmp/runs" run.timeout_s=120 data.path="$data" model.batch_norm=true
        model.channels=8,16 model.fc=32 train.epochs=1 train.max_steps=120 train.global_batch=64
        data.workers=1)

for sync in false true; do
  name=bn_sync_$sync
  rundir=$tmp/runs/$name
  run 300 "train_$sync" "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/fashion_mnist.yaml" \
    run.name=$name model.sync_batch_norm=$sync "${common[@]}"
  [[ $rc == 0 ]] || { show "train_$sync"; fail "training (sync $sync): exit $rc"; }
  [[ -s $rundir/model.pt ]] || { show "train_$sync"; fail "no model.pt in $rundir"; }
  line=$(grep -E '^final test accuracy: [0-9.]+%' "$tmp/train_$sync.out" | tail -n 1) ||
    { show "train_$sync"; fail "no final test accuracy line"; }
  echo "ok: sync_batch_norm=$sync: $line"

  run 300 "eval2_$sync" "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$rundir/config.yaml" --json
  [[ $rc == 0 ]] || { show "eval2_$sync"; fail "eval on 2 ranks: exit $rc"; }
  run 300 "eval1_$sync" "$bin" eval "$rundir/config.yaml" --json
  [[ $rc == 0 ]] || { show "eval1_$sync"; fail "eval on 1 rank: exit $rc"; }
  ckpt=$(ls -d "$rundir"/checkpoints/step-* | sort | tail -n 1)
  PYTHONPATH="$src/python:$src/tests/e2e" "$py" - "$data" "$rundir" "$tmp/eval2_$sync.out" \
    "$tmp/eval1_$sync.out" "$ckpt" "$line" <<'PY' || fail "sync_batch_norm=$sync: the run's evaluation is not its model.pt's"
import json, sys
import torch, dtrain_inputs, dtrain_models, reference
data, rundir, two, one, ckpt, line = sys.argv[1:7]
ev = [r for r in map(json.loads, open(f"{rundir}/metrics.jsonl")) if r["type"] == "eval"][-1]
two, one = (json.loads(open(p).read()) for p in (two, one))
assert f"{100 * ev['test_accuracy']:.2f}%" in line, (line, ev)
for k in ("test_loss", "test_accuracy", "test_count"):
    assert two[k] == ev[k], ("dtrain eval on 2 ranks", k, two[k], ev[k])
assert one["test_accuracy"] == ev["test_accuracy"] and one["test_count"] == ev["test_count"], (one, ev)
assert abs(one["test_loss"] - ev["test_loss"]) <= 1e-6 * ev["test_loss"], (one, ev)
print("the run's final evaluation:", {k: ev[k] for k in ("test_loss", "test_accuracy", "test_count")})
print("dtrain eval of model.pt, 2 ranks:", two, "\n  1 rank:", one)
# PyTorch alone: the twin with its BatchNorm2d from model.pt, in eval mode.
x, y = reference.idx_test_split(data)
model = dtrain_models.from_run(rundir)
assert len(model.norms) == 2 and all(c.bias is None for c in model.convs), model
sd = torch.load(f"{rundir}/model.pt")
assert sd["norms.0.num_batches_tracked"].item() == 120, sd["norms.0.num_batches_tracked"]
assert sd["norms.1.running_var"].abs().sum() > 0 and not torch.all(sd["norms.1.running_mean"] == 0)
with torch.no_grad():
    out = model(dtrain_inputs.pixels(x, dtrain_inputs.load(rundir)))
reference.expect_final_evaluation(rundir, out, y, rel=1e-5)
# The last checkpoint holds the same statistics as model.pt.
state = torch.load(f"{ckpt}/state.pt", weights_only=False)
for k in ("bn0.running_mean", "bn0.running_var", "bn1.running_mean", "bn1.running_var"):
    assert torch.equal(state["model"][k], sd["norms." + k[2:]]), k
PY
  echo "ok: sync_batch_norm=$sync: dtrain eval of model.pt (2 ranks: bit for bit; 1 rank) and PyTorch give the run's final evaluation; the checkpoint holds the same statistics"
done

# A model without BatchNorm: the key is refused by name.
run 120 nobn "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/fashion_mnist.yaml" \
  run.name=nobn "${common[@]/model.batch_norm=true/model.batch_norm=false}" model.sync_batch_norm=true
[[ $rc == 1 ]] || { show nobn; fail "sync_batch_norm on a cnn without BatchNorm: exit $rc, not 1"; }
grep -q "model.sync_batch_norm" "$tmp/nobn.err" || { show nobn; fail "the error does not name model.sync_batch_norm"; }
echo "ok: $(grep -m1 "error: model.sync_batch_norm" "$tmp/nobn.err")"
