#!/usr/bin/env bash
# data.format cifar10 / cifar100 on a tiny folder in the binary version's layout, written here by
# Python: each class a colour of its own plus noise, so that a small CNN learns it. Under mpirun
# -np 2, with the config's random crops and flips, the training loss falls and the test accuracy
# is far above chance, and dtrain eval gives the final evaluation with the training batches
# removed (the statistics come from preprocess.json); configs/
# cifar_resnet18.yaml runs a few steps on the same folder; CIFAR-100's fine and coarse labels
# train; and a truncated file or a label outside the classes is an error naming the file and the
# record.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup cifar_data
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}

# cifar-10-batches-bin/ (5 batches of 64 records, a test batch of 64) and cifar-100-binary/.
"$py" - "$tmp" <<'PY' || fail "could not write the CIFAR files"
import os, random, sys
root = sys.argv[1]
rng = random.Random(7)
grid = [(r, g, b) for r in (40, 128, 216) for g in (40, 128, 216) for b in (40, 128, 216)]
rng.shuffle(grid)
colours = grid[:20]  # at least 88 apart in one channel
def record(labels, cls):
    out = bytearray(labels)
    for c in range(3):
        base = colours[cls][c]
        out += bytes(min(255, max(0, base + rng.randrange(-30, 31))) for _ in range(1024))
    return out
def write(path, rows):
    with open(path, "wb") as f:
        for labels, cls in rows:
            f.write(record(labels, cls))
c10 = os.path.join(root, "cifar10", "cifar-10-batches-bin")
os.makedirs(c10)
for b in range(1, 6):
    write(f"{c10}/data_batch_{b}.bin", [([k], k) for k in (rng.randrange(10) for _ in range(64))])
write(f"{c10}/test_batch.bin", [([k], k) for k in (rng.randrange(10) for _ in range(64))])
c100 = os.path.join(root, "cifar100")
os.makedirs(c100)
def rows100(n):  # fine label 5 * coarse + j: the coarse class decides the colour
    return [([k, 5 * k + rng.randrange(5)], k) for k in (rng.randrange(20) for _ in range(n))]
write(f"{c100}/train.bin", rows100(320))
write(f"{c100}/test.bin", rows100(64))
# malformed: a record cut short, a label of 10
bad = os.path.join(root, "bad")
os.makedirs(bad)
write(f"{bad}/cut.bin", [([1], 1), ([2], 2)])
with open(f"{bad}/cut.bin", "r+b") as f:
    f.truncate(3073 + 1000)
write(f"{bad}/label.bin", [([1], 1), ([3], 3), ([10], 2)])
PY

cnn=(model.name=cnn model.channels=8,16 model.fc=32 model.channels_last=false train.precision=fp32
     train.optimizer=adamw train.lr=0.003 train.epochs=5 train.global_batch=32 train.warmup_steps=5 run.log_every=1
     run.dir="$tmp/runs" run.timeout_s=120 data.workers=1)

# 1. CIFAR-10 under two ranks: the loss falls, the test accuracy is far above chance (10%).
run 300 c10 "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/cifar_resnet18.yaml" \
  data.path="$tmp/cifar10" run.name=c10 "${cnn[@]}"
[[ $rc == 0 ]] || { show c10; fail "cifar10: exit $rc"; }
grep -q "cifar10 .*data_batch_1.bin and 4 more (320 x 3x32x32 uint8, 10 classes; standardized per channel" \
  "$tmp/c10.out" "$tmp/c10.err" || { show c10; fail "cifar10: the log does not describe the data"; }
grep -q "training: random 32x32 crops of the image padded by 4 zero pixels, flipped at random; test: cifar10 .*test_batch.bin" \
  "$tmp/c10.out" "$tmp/c10.err" || { show c10; fail "cifar10: the log does not describe the config's augmentation"; }
"$py" - "$tmp/runs/c10/metrics.jsonl" <<'PY' || { show c10; fail "cifar10: the loss did not fall"; }
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r["loss"] for r in recs if r["type"] == "train" and r.get("loss") is not None]
evals = [r for r in recs if r["type"] == "eval"]
first, last = sum(train[:3]) / 3, evals[-1]["test_loss"]
print(f"cifar10: first train loss {first:.3f}, final test loss {last:.3f}, accuracy {evals[-1]['test_accuracy']:.3f}")
assert first > 1.8, f"the first losses {train[:3]} are not near ln 10 = 2.3"
assert last < 0.5 * first, f"final test loss {last} is not below half the first train loss {first}"
assert evals[-1]["test_accuracy"] > 0.6, f"test accuracy {evals[-1]['test_accuracy']} is not far above chance (0.1)"
PY
echo "ok: cifar10 under 2 ranks"

# dtrain eval takes the train images' statistics from preprocess.json: with the training batches
# gone it reads the test batch alone and gives the training's final evaluation, bit for bit.
mkdir "$tmp/c10_train"
mv "$tmp"/cifar10/cifar-10-batches-bin/data_batch_*.bin "$tmp/c10_train/"
run 300 c10_eval "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" eval "$tmp/runs/c10/config.yaml" --json
mv "$tmp"/c10_train/* "$tmp/cifar10/cifar-10-batches-bin/"
[[ $rc == 0 ]] || { show c10_eval; fail "cifar10: dtrain eval without the training batches: exit $rc"; }
"$py" - "$tmp/runs/c10/metrics.jsonl" "$tmp/c10_eval.out" <<'PY' || fail "cifar10: dtrain eval disagrees with the training's evaluation"
import json, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "eval"][-1]
got = json.loads(open(sys.argv[2]).read())
for k in ("test_loss", "test_accuracy", "test_count"):
    assert got[k] == ev[k], (k, got[k], ev[k])
PY
echo "ok: cifar10: dtrain eval without the training batches gives the training's final evaluation"

# 2. The config's own model and optimizer (ResNet-18, SGD with Nesterov, no decay on biases and
#    norm weights) for a few steps on the same folder.
run 300 resnet "$bin" "$src/configs/cifar_resnet18.yaml" data.path="$tmp/cifar10" run.name=resnet \
  run.dir="$tmp/runs" train.max_steps=3 train.global_batch=16 train.eval=false data.workers=1 run.log_every=1
[[ $rc == 0 ]] || { show resnet; fail "configs/cifar_resnet18.yaml: exit $rc"; }
grep -q "SGD (Nesterov momentum 0.9), no weight decay on" "$tmp/resnet.out" "$tmp/resnet.err" ||
  { show resnet; fail "resnet: the optimizer line does not say Nesterov and no decay"; }
echo "ok: configs/cifar_resnet18.yaml runs on the folder"

# 3. CIFAR-100, fine labels (100 classes) and coarse ones (20).
for labels in fine coarse; do
  run 300 "c100_$labels" "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/cifar_resnet18.yaml" \
    data.format=cifar100 data.cifar_labels=$labels data.path="$tmp/cifar100" run.name="c100_$labels" \
    "${cnn[@]}"
  [[ $rc == 0 ]] || { show "c100_$labels"; fail "cifar100 $labels: exit $rc"; }
  classes=$([[ $labels == fine ]] && echo 100 || echo 20)
  grep -q "$classes classes, $labels labels" "$tmp/c100_$labels.out" "$tmp/c100_$labels.err" ||
    { show "c100_$labels"; fail "cifar100 $labels: not $classes classes"; }
done
echo "ok: cifar100 with fine and coarse labels"

# 4. Malformed files: an error naming the file and the record, non-zero exit.
expect_error() {  # NAME FILE PATTERN...
  local name=$1 file=$2
  shift 2
  run 120 "$name" "$bin" "$src/configs/cifar_resnet18.yaml" data.path="$tmp/bad" run.name="$name" "${cnn[@]}" \
    data.train_files="$file" data.test_files="$file"
  [[ $rc != 0 ]] || fail "$name: exit 0"
  for p in "$@"; do grep -qF -- "$p" "$tmp/$name.err" || { show "$name"; fail "$name: no '$p' in the error"; }; done
  echo "ok: $name: $(grep -m1 error "$tmp/$name.err")"
}
expect_error cut cut.bin "$tmp/bad/cut.bin" "record 1, at byte offset 3073, is truncated to 1000 bytes"
expect_error label label.bin "$tmp/bad/label.bin" "label 10 of record 2" "[0, 10)"
expect_error missing nothing.bin "data.train_files" "no file matches"
