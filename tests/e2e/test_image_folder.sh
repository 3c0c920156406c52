#!/usr/bin/env bash
# data.format image_folder (Note [image transforms]): PIL writes 1000 Fashion-MNIST images as
# JPEGs in one folder per class (800 to train on, 200 to test on, 10 classes under their names,
# which sort in another order than the IDX labels); a small CNN trains on them under mpirun -np 2
# with the training loss falling and the test accuracy far above chance (10%), and PIL and
# PyTorch alone, given the run's preprocess.json and model.pt, reproduce its final evaluation;
# configs/imagefolder_resnet.yaml runs a few steps on them; a damaged JPEG, an empty class folder
# and a missing folder are errors naming them, with a non-zero exit.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup image_folder
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}
e2e_fashion_mnist

"$py" -c 'import PIL' 2>/dev/null || fail "$py has no PIL: apt-get install python3-pil (launch/setup.sh does)"

"$py" - "$data" "$tmp/fm" <<'PY' || fail "could not write the JPEG folder"
import gzip, os, struct, sys
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
names = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
def idx(images, labels):
    with gzip.open(f"{src}/{images}") as f:
        magic, n, rows, cols = struct.unpack(">4i", f.read(16))
        pixels = f.read()
    with gzip.open(f"{src}/{labels}") as f:
        f.read(8)
        ys = f.read()
    return [(pixels[i * rows * cols:(i + 1) * rows * cols], ys[i]) for i in range(n)], rows, cols
def write(split, samples, rows, cols, count):
    for i, (px, y) in enumerate(samples[:count]):
        d = f"{out}/{split}/{names[y]}"
        os.makedirs(d, exist_ok=True)
        Image.frombytes("L", (cols, rows), px).save(f"{d}/{i:05d}.jpg", quality=90)
train, r, c = idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
test, _, _ = idx("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
write("train", train, r, c, 800)
write("val", test, r, c, 200)
open(f"{out}/train/{names[0]}/notes.txt", "w").write("not an image\n")
PY

common=(run.dir="$tmp/runs" run.timeout_s=120 run.log_every=5 run.progress=lines
        train.precision=fp32 model.channels_last=false data.workers=2 data.prefetch=4)
small=(model.name=cnn model.channels=[16,32] model.fc=64 data.image_size=28 data.resize=28
       data.crop_scale=[0.6,1] train.epochs=4 train.global_batch=32 train.optimizer=adamw
       train.lr=0.003 train.weight_decay=0 train.schedule=constant train.warmup_steps=0)

# 1. a CNN on 2 ranks: the loss falls, the test accuracy is far above 10%
run 400 train "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/imagefolder_resnet.yaml" \
  "${common[@]}" "${small[@]}" data.path="$tmp/fm" run.name=cnn
[[ $rc == 0 ]] || { show train; fail "training exited with code $rc"; }
grep -qE "image folder $tmp/fm/train: 800 images of 10 classes \(1 other file skipped\)" "$tmp/train.out" "$tmp/train.err" ||
  { show train; fail "the log does not describe the training folder (800 images of 10 classes, 1 other file skipped)"; }
acc=$(sed -nE 's/^final test accuracy: ([0-9.]+)%.*/\1/p' "$tmp/train.out" | tail -n 1)
[[ -n $acc ]] || { show train; fail "no 'final test accuracy: N%' line"; }
awk -v a="$acc" 'BEGIN { exit !(a > 45.0) }' || fail "final test accuracy $acc% is not above 45% (chance: 10%)"
"$py" - "$tmp/runs/cnn/metrics.jsonl" <<'PY' || fail "the training loss did not fall"
import json, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "train" and "loss" in r]
if len(losses) < 4:
    sys.exit(f"only {len(losses)} training losses in {sys.argv[1]}")
first, last = losses[0], sum(losses[-3:]) / 3
print(f"training loss {first:.3f} -> {last:.3f} ({len(losses)} records)")
if not last < 0.6 * first:
    sys.exit(f"the training loss went from {first:.3f} to {last:.3f}: not below 60% of the start")
PY
echo "ok: CNN on the JPEG folder, final test accuracy $acc%"

# preprocess.json beside model.pt: PIL and PyTorch alone (the twin Cnn of python/dtrain_models.py,
# the evaluation transform of python/dtrain_inputs.py) reproduce the run's final evaluation from the raw JPEGs of val/.
"$py" - "$src/python" "$tmp/fm/val" "$tmp/runs/cnn" <<'PY' || fail "preprocess.json does not reproduce the run's evaluation"
import os, sys
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "..", "tests", "e2e")]
import torch, dtrain_inputs, dtrain_models, reference
val, rundir = sys.argv[2], sys.argv[3]
pre = dtrain_inputs.load(rundir)
assert pre["format"] == "image_folder" and pre["input_shape"] == [3, 28, 28], pre
assert pre["class_names"] == sorted(os.listdir(val)), pre["class_names"]
t = pre["eval_transform"]
assert t == {"resize": 28, "center_crop": 28, "interpolation": "bilinear"}, t
files, ys = [], []
for label, name in enumerate(pre["class_names"]):
    for f in sorted(os.listdir(f"{val}/{name}")):
        files.append(f"{val}/{name}/{f}")
        ys.append(label)
model = dtrain_models.Cnn((3, 28, 28), (16, 32), 64, pre["num_classes"])
model.load_state_dict(torch.load(f"{rundir}/model.pt"))
model.eval()
with torch.no_grad():
    out = model(dtrain_inputs.image_files(files, pre))
reference.expect_final_evaluation(rundir, out, torch.tensor(ys))
PY
echo "ok: preprocess.json's pixels, transform and class names reproduce the run's evaluation in PyTorch"

# 2. the shipped ResNet config, a few steps on 32 x 32 crops
run 400 resnet "$bin" "$src/configs/imagefolder_resnet.yaml" "${common[@]}" data.path="$tmp/fm" run.name=resnet \
  model.name=resnet18 data.image_size=32 train.global_batch=16 train.max_steps=4 checkpoint.every_epoch=false
[[ $rc == 0 ]] || { show resnet; fail "configs/imagefolder_resnet.yaml exited with code $rc"; }
grep -q "^final test accuracy" "$tmp/resnet.out" || { show resnet; fail "configs/imagefolder_resnet.yaml: no evaluation"; }
grep -q "resized to 37, center crops of 32" "$tmp/resnet.out" "$tmp/resnet.err" ||
  { show resnet; fail "the test split is not resized to 37 (32 x 8/7) before its center crop"; }
echo "ok: configs/imagefolder_resnet.yaml"

# 3. bad data: each an error naming the folder or file, non-zero exit
expect_error() {  # NAME PATTERN... (the data under $tmp/bad)
  local name=$1
  shift
  run 120 "$name" "$bin" "$src/configs/imagefolder_resnet.yaml" "${common[@]}" "${small[@]}" \
    data.path="$tmp/bad" run.name="$name" train.max_steps=30
  [[ $rc != 0 ]] || { show "$name"; fail "$name: exit 0"; }
  for p in "$@"; do grep -qF -- "$p" "$tmp/$name.err" || { show "$name"; fail "$name: no '$p' in the error"; }; done
  echo "ok: $name: $(grep -m1 -i error "$tmp/$name.err")"
}
cp -r "$tmp/fm" "$tmp/bad"
victim=$(ls "$tmp/bad/train/coat" | head -n 1)
# cut inside its entropy-coded data: libjpeg-turbo decodes it with a warning, which is an error
size=$(stat -c %s "$tmp/fm/train/coat/$victim")
head -c $((size - 60)) "$tmp/fm/train/coat/$victim" >"$tmp/bad/train/coat/$victim"
expect_error damaged "$tmp/bad/train/coat/$victim" "libjpeg-turbo" "damaged or truncated"
cp "$tmp/fm/train/coat/$victim" "$tmp/bad/train/coat/$victim"
mkdir -p "$tmp/bad/train/zebra"
echo text >"$tmp/bad/train/zebra/readme.txt"
expect_error empty_class "$tmp/bad/train/zebra" "without a .jpg, .jpeg or .png file"
rm -r "$tmp/bad/train/zebra"
mv "$tmp/bad/train" "$tmp/bad/elsewhere"
expect_error missing "data.train_dir" "no folder $tmp/bad/train"
