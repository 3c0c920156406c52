#!/usr/bin/env bash
# e2e: `dtrain predict`. Three tiny models train in seconds on one rank: a CNN on a folder of PNG
# images (image_folder), an MLP on CSV rows (csv) and a GPT on text bytes (text). For each,
# predict runs on 1 and on 2 ranks of one intra-op thread each and the output files are the
# same, byte for byte (the CSV rows on 3 ranks too, whose number does not divide the training's
# global batch); on 2 ranks of 1 and 2 threads the values are within 1e-5 of one rank's and the
# classes the same (LibTorch's CPU kernels split sums by thread: the last digits may differ, as
# --help and docs/RUNNING.md say). PyTorch
# alone (the twins of python/dtrain_models.py loading model.pt, python/dtrain_inputs.py applying
# preprocess.json with PIL, no dtrain) gives every listed class probability within 1e-5 and the same top class, and the
# GPT's first greedy token. Greedy and seeded sampled generation repeat exactly. Only --output is
# written (the run directories are unchanged); an existing output, a missing input, an image
# that does not decode, a CSV without the run's columns and an unsupported format are errors
# naming the file or the option, printed once, exit 1.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup predict
e2e_torch_python

# Images (3 classes told apart by their color, PNGs of several sizes, grayscale and RGBA among the
# new ones), CSV rows and text.
"$py" - "$tmp" <<'PY' || fail "could not write the data"
import os, random, sys
from PIL import Image
root = sys.argv[1]
rng = random.Random(3)
colors = {"apple": (200, 40, 40), "leaf": (40, 180, 60), "sky": (50, 80, 210)}
def picture(color, w, h):
    im = Image.new("RGB", (w, h))
    im.putdata([tuple(max(0, min(255, c + rng.randint(-60, 60))) for c in color) for _ in range(w * h)])
    return im
for name, color in colors.items():
    os.makedirs(f"{root}/img/train/{name}")
    for i in range(12):
        picture(color, 16, 16).save(f"{root}/img/train/{name}/{i}.png")
os.makedirs(f"{root}/new/more")
for i, (name, color) in enumerate(sorted(colors.items()) * 3):
    im = picture(color, rng.randint(14, 24), rng.randint(14, 24))
    if i == 4: im = im.convert("L")
    if i == 5: im = im.convert("RGBA")
    im.save(f"{root}/new/{'more/' if i % 4 == 0 else ''}p{i}.png")
open(f"{root}/new/readme.txt", "w").write("not an image\n")
open(f"{root}/broken.png", "wb").write(open(f"{root}/new/p1.png", "rb").read()[:60])
w = [[rng.gauss(0, 1) for _ in range(3)] for _ in range(4)]
for name, n in (("train", 300), ("rows", 37)):
    with open(f"{root}/{name}.csv", "w") as f:
        f.write("id,f1,f2,f3,f4,species\n" if name == "train" else "f4,id,f2,f3,f1\n")
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(4)]
            k = max(range(3), key=lambda c: sum(x[j] * w[j][c] for j in range(4)))
            raw = [x[j] * (1 + 4 * j) + 10 * j for j in range(4)]
            f.write(f"{i}," + ",".join(f"{v:.5f}" for v in raw) + f",{k}\n" if name == "train" else
                    f"{raw[3]:.5f},{i},{raw[1]:.5f},{raw[2]:.5f},{raw[0]:.5f}\n")
open(f"{root}/text.txt", "w").write("the quick brown fox jumps over the lazy dog. " * 200)
open(f"{root}/prompt.txt", "w").write("the quick br")
PY

cat >"$tmp/img.yaml" <<YAML
run: {name: img, dir: "$tmp/runs", seed: 0, log_every: 0, timeout_s: 120}
model: {name: cnn, channels: [4], fc: 16, channels_last: false}
data: {format: image_folder, path: "$tmp/img", train_dir: train, test_dir: "", image_size: 12, resize: 14, workers: 0}
train: {epochs: 3, global_batch: 12, optimizer: adamw, lr: 0.01, precision: fp32}
YAML
cat >"$tmp/csv.yaml" <<YAML
run: {name: csv, dir: "$tmp/runs", seed: 0, log_every: 0, timeout_s: 120}
model: {name: mlp, hidden: [16]}
data: {format: csv, path: "$tmp", train_files: train.csv, test_fraction: 0.2, target_columns: species,
       feature_columns: "f1, f2, f3, f4", workers: 0}
train: {epochs: 3, global_batch: 32, optimizer: adamw, lr: 0.01, loss: cross_entropy}
YAML
cat >"$tmp/gpt.yaml" <<YAML
run: {name: gpt, dir: "$tmp/runs", seed: 0, log_every: 0, timeout_s: 120}
model: {name: gpt, n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 32, dropout: 0.0}
data: {format: text, path: "$tmp", train_files: text.txt, test_fraction: 0.1, windows: 1600, workers: 0}
train: {epochs: 1, global_batch: 32, optimizer: adamw, lr: 0.01, loss: cross_entropy, warmup_steps: 0}
YAML

# 1. Training (one rank each) leaves model.pt and preprocess.json.
for m in img csv gpt; do
  run 120 "train_$m" "$bin" "$tmp/$m.yaml"
  [[ $rc == 0 ]] || { show "train_$m"; fail "training $m: exit $rc"; }
  [[ -s $tmp/runs/$m/model.pt && -s $tmp/runs/$m/preprocess.json ]] || fail "$m: no model.pt and preprocess.json"
done
echo "ok: three models trained"
snapshot() { (cd "$tmp/runs" && find . -type f -exec sha256sum {} + | sort); }
before=$(snapshot)

# 2. predict on 1 and 2 ranks: the same bytes.
np1_np2() {  # NAME EXT ARGS...: NAME.1.EXT on one rank, NAME.2.EXT on two; the files must be equal
  local name=$1 ext=$2
  shift 2
  run 120 "$name.1" "$bin" predict "$@" run.threads=1 --output "$tmp/$name.1.$ext"
  [[ $rc == 0 ]] || { show "$name.1"; fail "$name on 1 rank: exit $rc"; }
  run 120 "$name.2" "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" predict "$@" run.threads=1 --output "$tmp/$name.2.$ext"
  [[ $rc == 0 ]] || { show "$name.2"; fail "$name on 2 ranks: exit $rc"; }
  cmp "$tmp/$name.1.$ext" "$tmp/$name.2.$ext" || fail "$name: the outputs of 1 and 2 ranks differ"
  echo "ok: $name: 1 and 2 ranks wrote the same $(wc -c <"$tmp/$name.1.$ext") bytes"
}
np1_np2 img jsonl "$tmp/img.yaml" --input "$tmp/new" --top-k 2 --batch-size 4
run 120 imgcsv "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" predict "$tmp/img.yaml" --input "$tmp/new" --top-k 0 \
  --output "$tmp/imgcsv.csv"
[[ $rc == 0 ]] || { show imgcsv; fail "CSV output on 2 ranks: exit $rc"; }
np1_np2 csv jsonl "$tmp/csv.yaml" --input "$tmp/rows.csv" --batch-size 8
np1_np2 gpt txt "$tmp/gpt.yaml" --input "$tmp/prompt.txt" --max-new-tokens 40
np1_np2 sample txt "$tmp/gpt.yaml" --prompt "the lazy" --max-new-tokens 40 --temperature 0.8 --top-k 5 --seed 7

# Ranks of different numbers of intra-op threads (run.threads 1 on rank 0, 2 on rank 1: mpiexec's
# MPMD form): the last digits may differ from 1 rank's, nothing more (the same inputs and classes
# in the same order, each probability or value within 1e-5).
unequal_threads() {  # NAME ARGS...: NAME.u.jsonl on 2 ranks of 1 and 2 threads, against NAME.1.jsonl
  local name=$1
  shift
  run 120 "$name.u" "$mpiexec" "${mpi_flags[@]}" -np 1 "$bin" predict "$@" run.threads=1 --output "$tmp/$name.u.jsonl" \
    : -np 1 "$bin" predict "$@" run.threads=2 --output "$tmp/$name.u.jsonl"
  [[ $rc == 0 ]] || { show "$name.u"; fail "$name on 2 ranks of 1 and 2 threads: exit $rc"; }
  "$py" - "$tmp/$name.1.jsonl" "$tmp/$name.u.jsonl" <<'PY' || fail "$name: 2 ranks of 1 and 2 threads differ from 1 rank by more than the last digits"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
for x, y in zip(a, b):
    assert x["input"] == y["input"], (x, y)
    if "top" in x:
        assert [t["index"] for t in x["top"]] == [t["index"] for t in y["top"]], (x, y)
        pairs = [(s["prob"], t["prob"]) for s, t in zip(x["top"], y["top"])]
    else:
        assert x["values"].keys() == y["values"].keys(), (x, y)
        pairs = [(x["values"][k], y["values"][k]) for k in x["values"]]
    for s, t in pairs:
        assert abs(s - t) <= 1e-5 * max(1.0, abs(s)), (x, y)
PY
  echo "ok: $name: 2 ranks of 1 and 2 intra-op threads: 1 rank's classes, values within 1e-5"
}
unequal_threads img "$tmp/img.yaml" --input "$tmp/new" --top-k 2 --batch-size 4
unequal_threads csv "$tmp/csv.yaml" --input "$tmp/rows.csv" --batch-size 8
# What --help says holds, and what not: the same bytes for the same intra-op threads.
"$bin" predict --help | tr '\n' ' ' | grep -qF "on any number of ranks that run the same number of intra-op threads (run.threads;" ||
  fail "predict --help does not say that its output depends on the intra-op threads"
[[ $(head -c 12 "$tmp/gpt.1.txt") == "the quick br" && $(wc -c <"$tmp/gpt.1.txt") == 52 ]] ||
  fail "the GPT's output is not the prompt and 40 bytes: $(cat "$tmp/gpt.1.txt")"
[[ $(snapshot) == "$before" ]] || fail "dtrain predict changed files of the run directories"
echo "ok: greedy and sampled generation repeat (two processes each); the runs' files are unchanged"

# 3. PyTorch alone, from model.pt and preprocess.json.
"$py" - "$src/python" "$tmp" <<'PY' || fail "PyTorch does not give dtrain predict's numbers"
import csv, json, os, sys
sys.path.insert(0, sys.argv[1])
import torch, dtrain_inputs, dtrain_models
tmp = sys.argv[2]
def check(name, records, probs, top_k):
    assert len(records) == len(probs), (name, len(records), len(probs))
    for r, p in zip(records, probs):
        top = r["top"]
        assert len(top) == top_k, (name, r)
        assert [e["prob"] for e in top] == sorted((e["prob"] for e in top), reverse=True), (name, r)
        for e in top:
            assert abs(e["prob"] - p[e["index"]].item()) <= 1e-5, (name, r, p.tolist())
        assert abs(p[top[0]["index"]].item() - p.max().item()) <= 1e-5, (name, r, p.tolist())
    print(f"{name}: {len(records)} inputs, probabilities within 1e-5 of PyTorch's")

# Images: torchvision's Resize + CenterCrop with PIL (dtrain_inputs), the twin Cnn.
pre = dtrain_inputs.load(f"{tmp}/runs/img")
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(f"{tmp}/new") for f in fs if f.endswith(".png"))
model = dtrain_models.from_run(f"{tmp}/runs/img")  # the Cnn of config.yaml: channels [4], fc 16
assert [c.out_channels for c in model.convs] == [4] and model.fc.out_features == 16, model
with torch.no_grad():
    probs = model(dtrain_inputs.image_files(files, pre)).softmax(1)
records = [json.loads(l) for l in open(f"{tmp}/img.1.jsonl")]
assert [r["input"] for r in records] == files, [r["input"] for r in records]
for r in records:
    for e in r["top"]:
        assert e["class"] == pre["class_names"][e["index"]], r
check("image files", records, probs, 2)
rows = list(csv.reader(open(f"{tmp}/imgcsv.csv")))
assert rows[0] == ["input"] + [f"{c}_{i}" for i in (1, 2, 3) for c in ("class", "prob")], rows[0]
check("image files (CSV)", [{"top": [{"index": pre["class_names"].index(row[k]), "prob": float(row[k + 1])}
                                     for k in (1, 3, 5)]} for row in rows[1:]], probs, 3)

# CSV rows: the run's standardization, the twin Mlp.
pre = dtrain_inputs.load(f"{tmp}/runs/csv/preprocess.json")
table = list(csv.DictReader(open(f"{tmp}/rows.csv")))
x = dtrain_inputs.csv_rows(table, pre)
model = dtrain_models.Mlp(4, (16,), pre["num_classes"])
model.load_state_dict(torch.load(f"{tmp}/runs/csv/model.pt"))
model.eval()
with torch.no_grad():
    probs = model(x).softmax(1)
records = [json.loads(l) for l in open(f"{tmp}/csv.1.jsonl")]
assert [r["input"] for r in records] == [f"{tmp}/rows.csv:{i + 2}" for i in range(len(table))], records[0]
check("CSV rows", records, probs, 3)

# GPT: the first greedy byte after the prompt.
model = dtrain_models.from_run(f"{tmp}/runs/gpt")  # config.yaml's model.*: GPT(256, 32, 1, 2, 32)
assert isinstance(model, dtrain_models.GPT) and len(model.transformer.h) == 1, model
assert model.lm_head.weight.shape == (256, 32) and model.transformer.wpe.weight.shape == (32, 32), model
prompt = open(f"{tmp}/prompt.txt", "rb").read()
with torch.no_grad():
    first = model(torch.tensor([list(prompt)]))[0, -1].argmax().item()
out = open(f"{tmp}/gpt.1.txt", "rb").read()
assert out[len(prompt)] == first, (out, first)
print(f"GPT: the first greedy byte {bytes([first])!r} is PyTorch's; dtrain wrote {out!r}")
PY
echo "ok: PyTorch from model.pt and preprocess.json gives predict's probabilities and first token"

# 4. Errors: exit 1, one line naming the file or option.
expect_error() {  # NAME TEXT: exit 1, TEXT in stderr, one error line
  [[ $rc == 1 ]] || { show "$1"; fail "$1: exit $rc, not 1"; }
  grep -qF -- "$2" "$tmp/$1.err" || { show "$1"; fail "$1: the error does not name '$2'"; }
  [[ $(grep -c "error" "$tmp/$1.err") == 1 ]] || { show "$1"; fail "$1: not one error line"; }
  echo "ok: $1: $(grep -m1 error "$tmp/$1.err")"
}
run 60 exists "$bin" predict "$tmp/csv.yaml" --input "$tmp/rows.csv" --output "$tmp/csv.1.jsonl"
expect_error exists "$tmp/csv.1.jsonl"
run 60 noinput "$bin" predict "$tmp/img.yaml" --input "$tmp/none" --output "$tmp/x.pred"
expect_error noinput "$tmp/none"
run 60 broken "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" predict "$tmp/img.yaml" --input "$tmp/broken.png" --output "$tmp/x.pred"
expect_error broken "$tmp/broken.png"
cut -d, -f1-3,5- "$tmp/rows.csv" >"$tmp/nof3.csv"
run 60 nocolumn "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" predict "$tmp/csv.yaml" --input "$tmp/nof3.csv" --output "$tmp/x.pred"
expect_error nocolumn "no column 'f3'"
grep -qF "$tmp/nof3.csv" "$tmp/nocolumn.err" || fail "nocolumn: the error does not name the file"
cp "$tmp/runs/csv/model.pt" "$tmp/w.pt"
printf '{"format": "synthetic", "input_shape": [4], "input_dtype": "float32", "task": "classification", "num_classes": 3}\n' >"$tmp/preprocess.json"
run 60 format "$bin" predict "$tmp/csv.yaml" --input "$tmp/rows.csv" --output "$tmp/x.pred" --weights "$tmp/w.pt"
expect_error format "data.format"
[[ ! -e $tmp/x.pred ]] || fail "a failed predict wrote $tmp/x.pred"
[[ $(snapshot) == "$before" ]] || fail "a failed dtrain predict changed files of the run directories"
# --force, on 3 ranks (train.global_batch 32 does not divide by 3: predict does not train).
run 60 force "$mpiexec" "${mpi_flags[@]}" -np 3 "$bin" predict "$tmp/csv.yaml" --input "$tmp/rows.csv" --batch-size 8 \
  --output "$tmp/img.2.jsonl" --force
[[ $rc == 0 ]] || { show force; fail "--force on 3 ranks: exit $rc"; }
cmp "$tmp/csv.1.jsonl" "$tmp/img.2.jsonl" || fail "--force on 3 ranks did not write what 1 rank wrote"
echo "ok: --force overwrote $tmp/img.2.jsonl; 3 ranks wrote what 1 rank wrote"
echo "PASS"
