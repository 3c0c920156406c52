#!/usr/bin/env bash
# e2e: `dtrain predict` on PNG and JPEG pictures for models trained on IDX files (Fashion-MNIST,
# configs/fashion_mnist_mlp.yaml made small) and on CIFAR-10's binary files, and their class
# names (issue 39, point 5). A PNG of a Fashion-MNIST test image (28 x 28 gray) gives the
# probabilities the IDX file of that image gives; pictures of other sizes, in RGB, and a JPEG give
# what PyTorch alone gives from model.pt and preprocess.json with PIL's convert("L") and
# resize((28, 28), BILINEAR) (python/dtrain_inputs.py), within 1e-5, on 1 and 2 ranks the same
# bytes; every record names its classes with the config's data.class_names, which
# preprocess.json holds. The CIFAR-10 run takes its class names from the batches.meta.txt beside
# its batches, and a gray picture of another size is made RGB and resized as PIL does. A wrong
# number of class names, and a file that is neither IDX nor a picture, are errors naming the key
# or the file, exit 1.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON; DTRAIN_FASHION_MNIST overrides the data folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup predict_pictures
e2e_torch_python
e2e_fashion_mnist t10k-images-idx3-ubyte.gz

# Pictures of Fashion-MNIST test images 0..3: image 0 as a 28 x 28 gray PNG and as a one-image
# IDX file; image 1 tinted RGB at 56 x 84; image 2 as a 100 x 70 JPEG; image 3 as a 20 x 20
# palette PNG. A tiny CIFAR-10 folder (classes told apart by colour) with batches.meta.txt, and
# a gray picture for it.
"$py" - "$data" "$tmp" <<'PY' || fail "could not write the pictures"
import gzip, os, random, struct, sys
from PIL import Image
data, tmp = sys.argv[1], sys.argv[2]
raw = gzip.open(f"{data}/t10k-images-idx3-ubyte.gz").read()
n, h, w = struct.unpack(">III", raw[4:16])
img = [Image.frombytes("L", (w, h), raw[16 + i * h * w:16 + (i + 1) * h * w]) for i in range(4)]
os.makedirs(f"{tmp}/pics")
img[0].save(f"{tmp}/pics/a_test0.png")
open(f"{tmp}/test0.idx", "wb").write(struct.pack(">IIII", 0x803, 1, h, w) + raw[16:16 + h * w])
rgb = Image.merge("RGB", [img[1], img[1].point(lambda v: v // 2), img[1].point(lambda v: 255 - v)])
rgb.resize((56, 84), Image.BILINEAR).save(f"{tmp}/pics/b_test1_rgb.png")
img[2].convert("RGB").resize((100, 70), Image.BICUBIC).save(f"{tmp}/pics/c_test2.jpg", quality=92)
img[3].resize((20, 20), Image.BILINEAR).convert("P").save(f"{tmp}/pics/d_test3_palette.png")
open(f"{tmp}/anim.gif", "wb").write(b"GIF89a" + bytes(20))

rng = random.Random(5)
colours = [(r, g, b) for r in (40, 216) for g in (40, 128, 216) for b in (40, 216)][:10]
def write(path, labels):
    with open(path, "wb") as f:
        for k in labels:
            f.write(bytes([k]) + b"".join(bytes(min(255, max(0, colours[k][c] + rng.randrange(-30, 31)))
                                                for _ in range(1024)) for c in range(3)))
c10 = f"{tmp}/cifar/cifar-10-batches-bin"
os.makedirs(c10)
for b in range(1, 6):
    write(f"{c10}/data_batch_{b}.bin", [rng.randrange(10) for _ in range(32)])
write(f"{c10}/test_batch.bin", [rng.randrange(10) for _ in range(16)])
names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
open(f"{c10}/batches.meta.txt", "w").write("\n".join(names) + "\n\n")
Image.new("L", (45, 30), 150).save(f"{tmp}/gray45x30.png")
PY

names='[T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt, Sneaker, Bag, Ankle boot]'
mlp=("$src/configs/fashion_mnist_mlp.yaml" run.name=fm run.dir="$tmp/runs" run.timeout_s=120 data.path="$data"
     model.hidden=32 train.epochs=1 train.max_steps=60 run.log_every=0 data.workers=0)
cifar=("$src/configs/cifar_resnet18.yaml" run.name=c10 run.dir="$tmp/runs" run.timeout_s=120 data.path="$tmp/cifar"
       model.name=cnn model.channels=4 model.fc=16 model.channels_last=false train.precision=fp32
       train.optimizer=adamw train.lr=0.003 train.epochs=2 train.global_batch=32 train.warmup_steps=0
       run.log_every=0 data.workers=0)

# 1. Training: preprocess.json holds the class names (the config's; CIFAR's batches.meta.txt).
run 300 train_fm "$bin" "${mlp[@]}"
[[ $rc == 0 ]] || { show train_fm; fail "training on Fashion-MNIST: exit $rc"; }
run 300 train_c10 "$bin" "${cifar[@]}"
[[ $rc == 0 ]] || { show train_c10; fail "training on CIFAR-10: exit $rc"; }
"$py" - "$tmp/runs" <<'PY' || fail "preprocess.json does not hold the class names"
import json, sys
fm = json.load(open(f"{sys.argv[1]}/fm/preprocess.json"))
assert fm["class_names"] == ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                             "Sneaker", "Bag", "Ankle boot"], fm
c10 = json.load(open(f"{sys.argv[1]}/c10/preprocess.json"))
assert c10["class_names"][0] == "airplane" and c10["class_names"][9] == "truck", c10
PY
echo "ok: preprocess.json names Fashion-MNIST's classes (data.class_names) and CIFAR-10's (batches.meta.txt)"

# 2. Pictures for the IDX-trained model, on 1 and 2 ranks; the IDX file of test image 0.
echo "not a picture" >"$tmp/pics/notes.txt"
run 120 pics1 "$bin" predict "${mlp[@]}" --input "$tmp/pics" --output "$tmp/pics.1.jsonl" --top-k 3 --batch-size 1
[[ $rc == 0 ]] || { show pics1; fail "predict on pictures: exit $rc"; }
grep -qF "$tmp/pics: 4 image(s); 1 other file skipped (not .jpg, .jpeg or .png)" "$tmp/pics1.out" ||
  { show pics1; fail "the log does not count the file it skipped"; }
grep -F "for 4 pictures of $tmp/pics (PNG, JPEG), made gray and resized to 28 x 28" "$tmp/pics1.out" ||
  { show pics1; fail "the log does not say how the pictures were prepared"; }
run 120 pics2 "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" predict "${mlp[@]}" --input "$tmp/pics" \
  --output "$tmp/pics.2.jsonl" --top-k 3 --batch-size 1
[[ $rc == 0 ]] || { show pics2; fail "predict on pictures, 2 ranks: exit $rc"; }
cmp "$tmp/pics.1.jsonl" "$tmp/pics.2.jsonl" || fail "pictures: 1 and 2 ranks wrote different files"
rm "$tmp/pics/notes.txt"  # the reference below reads every file of the folder
run 120 idx "$bin" predict "${mlp[@]}" --input "$tmp/test0.idx" --output "$tmp/idx.jsonl" --top-k 3
[[ $rc == 0 ]] || { show idx; fail "predict on the IDX file: exit $rc"; }
run 120 csv "$bin" predict "${mlp[@]}" --input "$tmp/pics/c_test2.jpg" --output "$tmp/one.csv" --top-k 2
[[ $rc == 0 ]] || { show csv; fail "predict on one JPEG, CSV output: exit $rc"; }
head -n 3 "$tmp/pics.1.jsonl" "$tmp/one.csv"

"$py" - "$src/python" "$tmp" <<'PY' || fail "PyTorch does not give dtrain predict's numbers for the pictures"
import csv, json, os, sys
sys.path.insert(0, sys.argv[1])
import torch, dtrain_inputs, dtrain_models
tmp = sys.argv[2]
run = f"{tmp}/runs/fm"
pre = dtrain_inputs.load(run)
names = pre["class_names"]
files = sorted(f"{tmp}/pics/{f}" for f in os.listdir(f"{tmp}/pics"))
model = dtrain_models.from_run(run)
with torch.no_grad():
    probs = model(dtrain_inputs.image_files(files, pre)).softmax(1)
records = [json.loads(l) for l in open(f"{tmp}/pics.1.jsonl")]
assert [r["input"] for r in records] == files, [r["input"] for r in records]
for r, p in zip(records, probs):
    assert len(r["top"]) == 3, r
    for e in r["top"]:
        assert e["class"] == names[e["index"]], r
        assert abs(e["prob"] - p[e["index"]].item()) <= 1e-5, (r, p.tolist())
    assert r["top"][0]["index"] == p.argmax().item(), (r, p.tolist())
print(f"{len(records)} pictures: probabilities within 1e-5 of PyTorch's on PIL's gray, resized pixels")
# The 28 x 28 PNG of test image 0 is that image: the IDX file's record, but for the input's name.
(idx,) = [json.loads(l) for l in open(f"{tmp}/idx.jsonl")]
assert idx["input"] == f"{tmp}/test0.idx[0]", idx
assert idx["top"] == records[0]["top"], (idx, records[0])
print("the PNG of test image 0 gives the IDX file's probabilities:", idx["top"][0])
rows = list(csv.reader(open(f"{tmp}/one.csv")))
assert rows[0] == ["input", "class_1", "prob_1", "class_2", "prob_2"], rows[0]
assert rows[1][1] == records[2]["top"][0]["class"] and rows[1][3] == records[2]["top"][1]["class"], rows
PY
echo "ok: pictures of any size for an IDX-trained model, named classes, as PyTorch and PIL compute"

# 3. A gray picture of another size for the CIFAR-10 model: made RGB, resized to 32 x 32.
run 120 c10 "$bin" predict "${cifar[@]}" --input "$tmp/gray45x30.png" --output "$tmp/c10.jsonl" --top-k 10
[[ $rc == 0 ]] || { show c10; fail "predict for the CIFAR-10 model: exit $rc"; }
cat "$tmp/c10.jsonl"
"$py" - "$src/python" "$tmp" <<'PY' || fail "PyTorch does not give dtrain predict's numbers for the CIFAR-10 model"
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, dtrain_inputs, dtrain_models
tmp = sys.argv[2]
pre = dtrain_inputs.load(f"{tmp}/runs/c10")
with torch.no_grad():
    p = dtrain_models.from_run(f"{tmp}/runs/c10")(dtrain_inputs.image_files([f"{tmp}/gray45x30.png"], pre)).softmax(1)[0]
(r,) = [json.loads(l) for l in open(f"{tmp}/c10.jsonl")]
assert len(r["top"]) == 10, r
for e in r["top"]:
    assert e["class"] == pre["class_names"][e["index"]], r
    assert abs(e["prob"] - p[e["index"]].item()) <= 1e-5, (r, p.tolist())
print("CIFAR-10: a gray 45 x 30 picture gives PyTorch's probabilities; top class", r["top"][0]["class"])
PY
echo "ok: the CIFAR-10 model names batches.meta.txt's classes for a resized gray picture"

# 4. Errors: exit 1, one line naming the key or the file.
expect_error() {  # NAME TEXT: exit 1, TEXT in stderr, one error line
  [[ $rc == 1 ]] || { show "$1"; fail "$1: exit $rc, not 1"; }
  grep -qF -- "$2" "$tmp/$1.err" || { show "$1"; fail "$1: the error does not name '$2'"; }
  [[ $(grep -c "error" "$tmp/$1.err") == 1 ]] || { show "$1"; fail "$1: not one error line"; }
  echo "ok: $1: $(grep -m1 error "$tmp/$1.err")"
}
run 120 ninenames "$bin" "$src/configs/fashion_mnist_mlp.yaml" run.name=nine run.dir="$tmp/runs" data.path="$data" \
  train.max_steps=1 "data.class_names=[a, b, c, d, e, f, g, h, i]"
expect_error ninenames "data.class_names"
grep -qF "gives 9 names for the model's 10 classes" "$tmp/ninenames.err" || { show ninenames; fail "ninenames: no counts"; }
run 120 gif "$bin" predict "${mlp[@]}" --input "$tmp/anim.gif" --output "$tmp/gif.jsonl"
expect_error gif "$tmp/anim.gif"
grep -qF "predict reads IDX image files and PNG or JPEG pictures" "$tmp/gif.err" || { show gif; fail "gif: no hint"; }
echo "PASS"
