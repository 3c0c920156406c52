#!/usr/bin/env bash
# data.format csv: an MLP learns a linearly separable 3-class problem from CSV files written here
# by Python, under mpirun -np 2 (test loss far below a uniform guess, ln 3 = 1.10); a linear
# model fits two regression targets from the same kind of file, its test split held out of the
# train file by data.test_fraction; and malformed files are errors naming file:line(:column).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup csv_data
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}

"$py" - "$tmp" <<'PY' || fail "could not write the CSV files"
import random, sys
root = sys.argv[1]
rng = random.Random(3)
w = [[rng.gauss(0, 1) for _ in range(3)] for _ in range(4)]
def rows(n):
    out = []
    for i in range(n):
        x = [rng.gauss(0, 2) for _ in range(4)]
        scores = [sum(x[j] * w[j][k] for j in range(4)) for k in range(3)]
        out.append((i, x, scores.index(max(scores))))
    return out
for name, n in (("train", 1200), ("test", 300)):
    with open(f"{root}/{name}.csv", "w") as f:
        f.write("id,f1,f2,f3,f4,species\n")
        for i, x, k in rows(n):
            f.write(f"{i}," + ",".join(f"{v:.5f}" for v in x) + f",{k}\n")
with open(f"{root}/reg.csv", "w") as f:
    f.write("a,b,c,y1,y2\n")
    for _ in range(1000):
        a, b, c = (rng.uniform(-1, 1) for _ in range(3))
        f.write(f"{a:.6f},{b:.6f},{c:.6f},{2*a - b + 0.5:.6f},{c - 3*b:.6f}\n")
open(f"{root}/word.csv", "w").write("f1,f2,f3,f4,species\n1,2,3,4,0\n1,2,three,4,1\n")
open(f"{root}/short.csv", "w").write("f1,f2,f3,f4,species\n1,2,3,4,0\n\n1,2,3,1\n")
open(f"{root}/frac.csv", "w").write("f1,f2,f3,f4,species\n1,2,3,4,0\n1,2,3,4,1.5\n")
open(f"{root}/empty.csv", "w").close()
PY

cat >"$tmp/csv.yaml" <<YAML
run: {name: csv, dir: "$tmp/runs", seed: 0, log_every: 10, timeout_s: 120}
model: {name: mlp, hidden: [32]}
data: {format: csv, path: "$tmp", train_files: train.csv, test_files: test.csv, target_columns: species,
       feature_columns: "f1, f2, f3, f4", workers: 1}
train: {epochs: 8, global_batch: 64, optimizer: adamw, lr: 0.01, loss: cross_entropy}
YAML

# 1. Classification under two ranks.
run 300 classes "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/csv.yaml"
[[ $rc == 0 ]] || { show classes; fail "classification: exit $rc"; }
grep -q "csv $tmp/train.csv (1200 rows, 4 features: f1, f2, f3, f4, standardized per column; target 'species', 3 classes" \
  "$tmp/classes.out" "$tmp/classes.err" || { show classes; fail "classification: the log does not describe the data"; }
line=$(grep -E '^final test accuracy: [0-9.]+% \(loss' "$tmp/classes.out" | tail -n 1) ||
  { show classes; fail "classification: no final test accuracy line"; }
acc=$(sed -E 's/^final test accuracy: ([0-9.]+)%.*/\1/' <<<"$line")
loss=$(sed -E 's/.*\(loss ([0-9.eE+-]+),.*/\1/' <<<"$line")
awk -v a="$acc" -v l="$loss" 'BEGIN { exit !(a > 90 && l < 0.35) }' ||
  fail "classification: test accuracy $acc% / loss $loss not above 90% / below 0.35 (uniform guess: 1.10)"
echo "ok: csv classification, test accuracy $acc%, loss $loss (uniform guess 1.10)"

# 2. Regression on two target columns, 20% of the rows held out.
run 300 regression "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/csv.yaml" run.name=reg model.name=linear \
  data.train_files=reg.csv "data.test_files=''" data.test_fraction=0.2 data.csv_task=regression \
  data.target_columns=y1,y2 "data.feature_columns=''" train.loss=mse train.lr=0.05 train.epochs=20 train.schedule=cosine
[[ $rc == 0 ]] || { show regression; fail "regression: exit $rc"; }
grep -q "csv: 200 rows held out of the train files" "$tmp/regression.out" "$tmp/regression.err" ||
  { show regression; fail "regression: no 200 held-out rows"; }
loss=$(sed -nE 's/^final test loss: ([0-9.eE+-]+).*/\1/p' "$tmp/regression.out" | tail -n 1)
[[ -n $loss ]] || { show regression; fail "regression: no 'final test loss' line"; }
# The targets' variance is about 1.6 and 3; a linear fit is exact up to the 6 printed digits.
awk -v l="$loss" 'BEGIN { exit !(l < 0.01) }' || fail "regression: final test loss $loss is not below 0.01"
echo "ok: csv regression, final test loss $loss"

# 3. Malformed files.
expect_error() {  # NAME FILE PATTERN...
  local name=$1 file=$2
  shift 2
  run 120 "$name" "$bin" "$tmp/csv.yaml" run.name="$name" data.train_files="$file" "data.test_files=''" "data.feature_columns=''"
  [[ $rc != 0 ]] || fail "$name: exit 0"
  for p in "$@"; do grep -qF -- "$p" "$tmp/$name.err" || { show "$name"; fail "$name: no '$p' in the error"; }; done
  echo "ok: $name: $(grep -m1 error "$tmp/$name.err")"
}
expect_error word word.csv "$tmp/word.csv:3:3" "column 3 'f3': 'three' is not a number"
expect_error short short.csv "$tmp/short.csv:4" "4 field(s), the header has 5 columns"
expect_error frac frac.csv "$tmp/frac.csv:3:5" "class id 1.5 is not a whole number"
expect_error empty empty.csv "$tmp/empty.csv" "empty file"
run 120 column "$bin" "$tmp/csv.yaml" run.name=column data.target_columns=label
[[ $rc != 0 ]] || fail "column: exit 0"
grep -qF "data.target_columns: no column 'label'; the columns of $tmp/train.csv are: id, f1, f2, f3, f4, species" \
  "$tmp/column.err" || { show column; fail "column: the error does not list the columns"; }
echo "ok: column: $(grep -m1 error "$tmp/column.err")"
