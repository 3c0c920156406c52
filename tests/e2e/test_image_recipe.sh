#!/usr/bin/env bash
# e2e: the image recipe on 2 MPI ranks (Fashion-MNIST, the cnn with BatchNorm): label smoothing,
# Mixup and CutMix, the weight average (train.ema_decay) and a validation split chosen on by
# train.monitor val_accuracy. One run trains 40 steps with checkpoints every 20; a second run
# resumed from the first's step-20 checkpoint ends with the same checkpoint, model.pt and
# evaluations, bit for bit (the mixing draws, the average and the split continue exactly).
# model.pt is the average's (model.json and best.json say so); the evaluations carry both
# weights' numbers and the validation split's; the recipe's bad values are errors naming the key.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON; DTRAIN_FASHION_MNIST overrides the data folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup image_recipe
e2e_torch_python
e2e_fashion_mnist

common=(run.dir="$tmp/runs" run.timeout_s=120 data.path="$data" model.batch_norm=true
        model.channels=8,16 model.fc=32 train.epochs=1 train.max_steps=40 train.global_batch=64
        data.workers=1 train.eval_every_steps=20 checkpoint.every_steps=20 checkpoint.keep=3
        train.label_smoothing=0.1 train.mixup_alpha=0.2 train.cutmix_alpha=1.0
        train.ema_decay=0.999 train.ema_every=4 train.ema_warmup_steps=8
        data.val_fraction=0.02 train.monitor=val_accuracy checkpoint.keep_best=true)

run 300 straight "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/fashion_mnist.yaml" \
  run.name=straight "${common[@]}"
[[ $rc == 0 ]] || { show straight; fail "training: exit $rc"; }
a=$tmp/runs/straight
grep -q "1200 training samples held out\|1200 samples held out" "$tmp/straight.out" ||
  { show straight; fail "the data line does not say how many samples were held out"; }
grep -qE "val loss [0-9.]+  val accuracy [0-9.]+%" "$tmp/straight.out" ||
  { show straight; fail "no val loss / val accuracy on the evaluation lines"; }
grep -qE "\(EMA; model loss [0-9.]+ accuracy" "$tmp/straight.out" ||
  { show straight; fail "the evaluation lines do not show the model beside the EMA"; }
echo "ok: $(grep -m1 -E 'val loss' "$tmp/straight.out")"

run 300 resumed "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/fashion_mnist.yaml" \
  run.name=resumed "${common[@]}" checkpoint.resume="$a/checkpoints/step-000000020"
[[ $rc == 0 ]] || { show resumed; fail "the resumed run: exit $rc"; }
b=$tmp/runs/resumed
grep -q "resumed from" "$tmp/resumed.out" || { show resumed; fail "the second run did not resume"; }
same_model "$a/checkpoints/step-000000040" "$b/checkpoints/step-000000040"

"$py" - "$a" "$b" <<'PY' || fail "the resumed run is not the straight one, or the recipe's records are wrong"
import json, re, sys, torch
a, b = sys.argv[1:3]
sa, sb = (torch.load(f"{r}/checkpoints/step-000000040/state.pt", weights_only=False) for r in (a, b))
assert sa["ema"].keys() == sa["model"].keys(), "the checkpoint's average is under the model's names"
for k in sa["ema"]:
    assert torch.equal(sa["ema"][k], sb["ema"][k]), ("the weight average differs after resuming", k)
assert sa["ema_updates"] == sb["ema_updates"] == 8, (sa["ema_updates"], sb["ema_updates"])
ma, mb = (torch.load(f"{r}/model.pt") for r in (a, b))
# model.pt holds the average (train.ema_output) under the twin's names (convs.i, norms.i), its
# BatchNorm statistics one set (averaged over the ranks at the last evaluation).
twin = lambda k: re.sub(r"^norms\.(\d+)\.", r"bn\1.", re.sub(r"^convs\.(\d+)\.", r"conv\1.", k))
for k in ma:
    assert torch.equal(ma[k], mb[k]), ("model.pt differs after resuming", k)
    assert torch.equal(ma[k], sa["ema"][twin(k)]), ("model.pt is not the average", k)
assert not all(torch.equal(sa["ema"][k], sa["model"][k]) for k in sa["model"]), "the average is the model"
evals = lambda r: [x for x in map(json.loads, open(f"{r}/metrics.jsonl")) if x["type"] == "eval"]
ea, eb = evals(a), evals(b)
assert [e["step"] for e in ea] == [20, 40], ea
last_a, last_b = ea[-1], eb[-1]
for k in ("test_loss", "test_accuracy", "val_loss", "val_accuracy", "other_test_loss", "other_test_accuracy"):
    assert last_a[k] == last_b[k], (k, last_a[k], last_b[k])
assert last_a["weights"] == "ema" and last_a["val_count"] == 1200, last_a
record = json.load(open(f"{a}/model.json"))
assert record["weights_of"] == "ema", record
best = json.load(open(f"{a}/best/best.json"))
assert best["metric"] == "val_accuracy" and best["weights_of"] == "ema", best
assert best["value"] == max(e["val_accuracy"] for e in ea), (best, ea)
print("resumed at step 20 = straight: the average, model.pt and the evaluations; model.json:",
      record["weights_of"], "; best:", best["metric"], best["value"], "at step", best["step"])
PY
echo "ok: a run resumed at step 20 ends as the straight run (checkpoint, weight average, model.pt, evaluations)"

# Bad values: one error naming the key, exit 1.
bad() {  # NAME KEY OVERRIDES...
  local name=$1 key=$2
  shift 2
  run 120 "$name" "$bin" "$src/configs/fashion_mnist.yaml" run.name="$name" run.dir="$tmp/runs" data.path="$data" "$@"
  [[ $rc == 1 ]] || { show "$name"; fail "$name: exit $rc, not 1"; }
  grep -q "$key" "$tmp/$name.err" || { show "$name"; fail "$name: the error does not name $key"; }
  echo "ok: $(grep -m1 "error" "$tmp/$name.err")"
}
bad erase_idx data.random_erase data.random_erase=0.25
bad monitor_val train.monitor train.monitor=val_loss
bad alpha train.mixup_alpha train.mixup_alpha=-1
bad policy data.auto_augment data.auto_augment=randaugment
