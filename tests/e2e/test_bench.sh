#!/usr/bin/env bash
# e2e: `dtrain bench`. A micro-batch sweep on 2 ranks prints its table and writes a CSV and a JSON
# with one row per size (global batch = micro-batch x 2, samples = timed steps x global batch,
# positive samples/s); a size whose forward pass cannot get its memory (a real allocation failure:
# the ranks run under `ulimit -v`, and the size's first activation alone is 4 times that limit) is
# "does not fit" and the sweep goes on to the next size and exits 0; a loader-workers sweep works;
# bad arguments fail with a message naming the option; an existing output is not written over
# (unless --force); the settings print no summary or diagnosis of their own; --sweep of a key that is
# none of the older options (dist.bucket_cap_mb on 2 ranks) gives a row per value, in a column
# named by the key, and a bad --sweep names the key. A config's warmup and early stopping give no
# warnings in a bench, and a recommendation that changes the global batch says so (old -> new).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup bench
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}
cfg=$src/configs/synthetic_linear.yaml

# check_results PREFIX EXPECTED_ROWS_JSON: the CSV and the JSON agree with each other and with the
# rules; EXPECTED_ROWS_JSON lists [micro_batch, workers, global_batch, fits] per row.
check_results() {
  "$py" - "$1" "$2" <<'EOF'
import csv, json, sys
prefix, expected = sys.argv[1], json.loads(sys.argv[2])
j = json.load(open(prefix + ".json"))
rows = list(csv.DictReader(open(prefix + ".csv")))
assert len(j["rows"]) == len(expected) == len(rows), (len(j["rows"]), len(rows), expected)
steps = j["steps"]
for r, c, (micro, workers, global_batch, fits) in zip(j["rows"], rows, expected):
    assert (r["micro_batch"], r["workers"], r["global_batch"], r["fits"]) == (micro, workers, global_batch, fits), r
    assert (int(c["micro_batch"]), int(c["workers"]), int(c["global_batch"])) == (micro, workers, global_batch), c
    assert c["fits"] == ("true" if fits else "false"), c
    if not fits:
        assert r["note"].startswith("does not fit: out of memory"), r
        assert r["samples_per_s"] is None and c["samples_per_s"] == "", (r, c)
        continue
    assert r["timed_steps"] == steps, r
    assert r["timed_samples"] == steps * global_batch, r
    assert r["samples_per_s"] > 0, r
    assert abs(r["samples_per_s"] - r["timed_samples"] / r["timed_seconds"]) <= 1e-9 * r["samples_per_s"], r
    assert abs(r["step_mean_s"] - r["timed_seconds"] / steps) <= 1e-9 * r["step_mean_s"], r
    assert abs(float(c["samples_per_s"]) - r["samples_per_s"]) <= 1e-8 * r["samples_per_s"], (c, r)
    assert 0 <= r["data_wait_share"] <= 1, r
    assert r["peak_memory_bytes"] is None and r["gpu_utilization"] is None, r  # CPU
rec = j["recommended"]
assert rec is not None and j["rows"][rec["row"]]["fits"], rec
assert [c["recommended"] for c in rows].count("true") == 1
assert rows[rec["row"]]["recommended"] == "true"
print("ok:", prefix, [(r["micro_batch"], r["workers"], r["samples_per_s"]) for r in j["rows"]])
EOF
}

# 1. A micro-batch sweep on 2 ranks.
run 120 sweep "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" bench "$cfg" --micro-batches 8,16,32 \
  --out "$tmp/sweep" run.threads=1
[[ $rc == 0 ]] || { show sweep; fail "the sweep exited with $rc"; }
grep -q "on 2 rank(s), cpu; 5 warm-up and 20 timed steps per setting" "$tmp/sweep.out" ||
  { show sweep; fail "no table header"; }
grep -q "^global batch = micro-batch x 2 rank(s): one micro-batch per rank, no accumulation" "$tmp/sweep.out" ||
  { show sweep; fail "the table does not say how the global batch was chosen"; }
for m in 8 16 32; do
  grep -qE "^ *$m +0 +$((2 * m)) +1 +[0-9]+\.[0-9] " "$tmp/sweep.out" || { show sweep; fail "no table row for $m"; }
done
# Each setting's rate is named apart from its "done:" line (which counts the warm-up steps too),
# and is the table's figure for that setting.
for m in 8 16 32; do
  r=$(awk -v s="micro-batch $m per rank" 'index($0, s) { f = 1 } f && /^  bench: / { print; exit }' "$tmp/sweep.out" |
      grep -oE '^  bench: [0-9.]+ samples/s over the 20 timed steps' | grep -oE '[0-9]+\.[0-9]') ||
    { show sweep; fail "no named bench rate for micro-batch $m"; }
  grep -qE "^ *$m +0 +$((2 * m)) +1 +$r " "$tmp/sweep.out" || { show sweep; fail "micro-batch $m: $r samples/s is not the table's"; }
done
grep -q "^recommended: micro-batch " "$tmp/sweep.out" || { show sweep; fail "no recommendation"; }
[[ $(grep -c "^bench 1/3: " "$tmp/sweep.out") == 1 ]] || { show sweep; fail "rank 1 speaks too"; }
[[ $(grep -c "^micro  *workers" "$tmp/sweep.out") == 1 ]] || { show sweep; fail "not one table"; }
# One table, not a diagnosis and a summary per setting.
! grep -qE "^diagnosis:|^done: " "$tmp/sweep.out" || { show sweep; fail "a setting printed its own summary or diagnosis"; }
check_results "$tmp/sweep" '[[8,0,16,true],[16,0,32,true],[32,0,64,true]]' || fail "sweep results"

# 2. A size that cannot get its memory: does not fit, and the sweep goes on.
big=131072  # x 65536 hidden x 4 bytes = 32 GiB for the first layer's output, under an 8 GiB limit
cat >"$tmp/wide.yaml" <<EOF
run: {name: wide, threads: 1}
model: {name: mlp, hidden: [65536]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: $((2 * big)),
       synthetic_test_size: 0, synthetic_features: 4, synthetic_classes: 2, workers: 1}
train: {global_batch: 16, optimizer: sgd, lr: 0.01}
EOF
run 180 nofit bash -c 'ulimit -v 8388608 && exec "$@"' limit "$mpiexec" "${mpi_flags[@]}" -np 2 \
  "$bin" bench "$tmp/wide.yaml" --micro-batches 4,$big,8 --warmup-steps 1 --steps 3 --out "$tmp/nofit"
[[ $rc == 0 ]] || { show nofit; fail "a size that does not fit ended the sweep (exit $rc)"; }
grep -qE "^ *$big +1 +$((2 * big)) +1 .*does not fit: out of memory at step 0" "$tmp/nofit.out" ||
  { show nofit; fail "no 'does not fit' row for $big"; }
grep -q "bench 3/3: micro-batch 8 per rank" "$tmp/nofit.out" || { show nofit; fail "the sweep did not go on"; }
grep -q "can't allocate memory" "$tmp/nofit.err" || { show nofit; fail "no allocator failure was reported"; }
check_results "$tmp/nofit" "[[4,1,8,true],[$big,1,$((2 * big)),false],[8,1,16,true]]" || fail "nofit results"

# 3. A loader-workers sweep: the config's global batch (128).
run 120 workers "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" bench "$cfg" --workers 0,2 --steps 10 \
  --out "$tmp/workers" run.threads=1
[[ $rc == 0 ]] || { show workers; fail "the workers sweep exited with $rc"; }
grep -q "^global batch and micro-batch: the config's" "$tmp/workers.out" || { show workers; fail "no global batch line"; }
check_results "$tmp/workers" '[[64,0,128,true],[64,2,128,true]]' || fail "workers results"

# 4. Bad arguments: a clear error naming the option, a non-zero exit, no files.
bad() {  # NAME EXPECTED_STDERR ARGS...
  local name=$1 want=$2
  shift 2
  run 60 "$name" "$bin" bench "$cfg" --out "$tmp/$name" "$@"
  [[ $rc != 0 ]] || { show "$name"; fail "$name: exit 0"; }
  grep -qF -- "$want" "$tmp/$name.err" || { show "$name"; fail "$name: no '$want' on stderr"; }
  [[ ! -e $tmp/$name.csv && ! -e $tmp/$name.json ]] || fail "$name: wrote files"
  echo "ok: $name: $want"
}
bad zero "error: --micro-batches: must be >= 1, got 0 (in '0,abc')" --micro-batches 0,abc
bad word "error: --micro-batches: 'abc' is not a whole number (in '8,abc')" --micro-batches 8,abc
bad empty "error: --workers: an empty entry (in '0,,2')" --workers 0,,2
bad steps "error: train.max_steps: dtrain bench sets this key" --micro-batches 8 train.max_steps=3
bad divide "error: --micro-batches: micro-batch 48 on 1 rank(s): train.micro_batch" --micro-batches 48 train.global_batch=128

# 5. An existing output is not written over; --force writes it.
sums=$(md5sum "$tmp/sweep.csv" "$tmp/sweep.json")
run 60 again "$bin" bench "$cfg" --micro-batches 8 --out "$tmp/sweep"
[[ $rc != 0 ]] || { show again; fail "an existing output was accepted"; }
grep -qF "$tmp/sweep.csv: exists; dtrain bench does not write over it" "$tmp/again.err" ||
  { show again; fail "the refusal does not name the file"; }
[[ $(md5sum "$tmp/sweep.csv" "$tmp/sweep.json") == "$sums" ]] || fail "the existing output changed"
run 60 force "$bin" bench "$cfg" --micro-batches 8 --steps 5 --out "$tmp/sweep" --force run.threads=1
[[ $rc == 0 ]] || { show force; fail "--force exited with $rc"; }
check_results "$tmp/sweep" '[[8,0,8,true]]' || fail "--force results"

# 6. The default output: bench-<config file name> in the current folder.
mkdir "$tmp/here"
run 60 default bash -c 'cd "$1" && shift && exec "$@"' cd "$tmp/here" "$bin" bench "$cfg" --steps 2 run.threads=1
[[ $rc == 0 ]] || { show default; fail "the default output run exited with $rc"; }
check_results "$tmp/here/bench-synthetic_linear" '[[128,0,128,true]]' || fail "default output"
# 7. --sweep of another key: a row per value, the key a column of the table, the CSV and the JSON.
run 120 capsweep "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" bench "$cfg" --sweep dist.bucket_cap_mb=1,25 \
  --steps 3 --warmup-steps 1 --out "$tmp/caps" run.threads=1
[[ $rc == 0 ]] || { show capsweep; fail "the --sweep run exited with $rc"; }
grep -qE "^ *micro +workers +global +accum +dist.bucket_cap_mb +samples/s" "$tmp/capsweep.out" ||
  { show capsweep; fail "no dist.bucket_cap_mb column"; }
grep -q "bench 2/2: .*dist.bucket_cap_mb 25" "$tmp/capsweep.out" || { show capsweep; fail "no setting line for 25"; }
check_results "$tmp/caps" '[[64,0,128,true],[64,0,128,true]]' || fail "--sweep results"
"$py" - "$tmp/caps" <<'EOF2' || fail "--sweep columns"
import csv, json, sys
j = json.load(open(sys.argv[1] + ".json"))
rows = list(csv.DictReader(open(sys.argv[1] + ".csv")))
assert [r["dist.bucket_cap_mb"] for r in j["rows"]] == [1, 25], j["rows"]
assert [r["dist.bucket_cap_mb"] for r in rows] == ["1.0", "25.0"], rows  # as the config dump writes them
print("ok: --sweep dist.bucket_cap_mb", [r["samples_per_s"] for r in j["rows"]])
EOF2
# 8. Issue 54, point 2: a config's training settings that a bench does not run (a long warmup,
#    train.monitor with early stopping and best/) give no warnings or lines of their own, and a
#    recommendation whose global batch is not the config's (128) says so, old -> new, with the
#    learning rate scaled (0.01 x 16 / 128).
run 120 recipe "$bin" bench "$cfg" --micro-batches 8,16 --steps 3 --warmup-steps 1 --out "$tmp/recipe" \
  run.threads=1 train.warmup_steps=1000 train.monitor=test_loss train.early_stop_patience=2 \
  checkpoint.keep_best=true train.eval_every_steps=2
[[ $rc == 0 ]] || { show recipe; fail "the bench of a config with a warmup and early stopping exited with $rc"; }
! grep -q "warning" "$tmp/recipe.err" "$tmp/recipe.out" || { show recipe; fail "the bench printed warnings about training"; }
! grep -qiE "early stop|warmup" "$tmp/recipe.out" || { show recipe; fail "the bench printed lines about early stopping or the warmup"; }
grep -qE "^the recommended setting changes train.global_batch 128 -> (8|16) \(micro-batch (8|16) x 1 accumulation step\(s\) x 1 rank\(s\)\): that changes the training recipe, not only its speed; scale train.lr with it \(the linear scaling rule: train.lr 0.01 -> (0.000625|0.00125)\)" "$tmp/recipe.out" ||
  { show recipe; fail "the recommendation does not say that it changes the global batch"; }
"$py" - "$tmp/recipe.json" <<'EOF3' || fail "the JSON's global batch change"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["config_global_batch"] == 128 and j["recommended"]["global_batch"] in (8, 16), j["recommended"]
assert j["global_batch_change"].startswith("the recommended setting changes train.global_batch 128 -> "), j
EOF3
! grep -q "changes train.global_batch" "$tmp/workers.out" || { show workers; fail "the config's own global batch was said to change"; }
echo "ok: no training warnings in a bench; the recommendation's global batch change is said"
bad sweepkey "error: data.worker: unknown key (--sweep 'data.worker=1,2'); did you mean 'data.workers'?" \
  --sweep data.worker=1,2
bad sweepvalue "error: dist.bucket_cap_mb: " --sweep dist.bucket_cap_mb=25,abc
bad sweepnotused "error: --sweep: data.image_size does not apply to this run (data.format is synthetic)" \
  --sweep data.image_size=32,64
echo "PASS"
