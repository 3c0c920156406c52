#!/usr/bin/env bash
# e2e: a rerun never destroys. The same command run again on a finished run (also one whose
# model.pt is gone), or run again with a
# changed training key (train.lr), is refused before its data is loaded and anything is written: exit 1, one error line
# (the ranks agree; no MPI abort banner) naming the checkpoint, the step and the fix, and every
# file of the run directory byte for byte as it was. With more to train (a higher train.epochs)
# it resumes and appends, and its report charts the whole run while counting this process's
# samples and rates; after a cosine run, it says the learning rate before and after, and
# train.resume_schedule stretch and restart give the formulas' rates.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup rerun
e2e_torch_python
cfg=$src/configs/synthetic_linear.yaml
common=(run.dir="$tmp/runs" run.name=r data.synthetic_size=2048 train.global_batch=128 run.log_every=8
        train.eval=false)
np2=("$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" "${common[@]}")
files() { (cd "$tmp/runs/r" && find . -type f ! -name .lock -exec md5sum {} + | sort); }

run 120 first "${np2[@]}" train.epochs=2
[[ $rc == 0 ]] || { show first; fail "the first run: exit $rc"; }
before=$(files)
[[ -n $before && $before == *report.txt* && $before == *metrics.jsonl* ]] || fail "the first run wrote no report"

for change in "" "train.lr=0.003"; do
  name=again${change:+_lr}
  run 120 "$name" "${np2[@]}" train.epochs=2 $change
  [[ $rc == 1 ]] || { show "$name"; fail "$name: a finished run run again: exit $rc, expected 1"; }
  for s in "error: " "this run has finished: its checkpoint is at step 32, the end of training (train.epochs 2)" \
           "nothing was written" "raise train.epochs or train.max_steps" "another run.name"; do
    grep -qF -- "$s" "$tmp/$name.err" || { show "$name"; fail "$name: the error lacks '$s'"; }
  done
  [[ $(grep -c "error: " "$tmp/$name.err") == 1 ]] || { show "$name"; fail "$name: the error is not printed once"; }
  ! grep -q "MPI_ABORT" "$tmp/$name.err" "$tmp/$name.out" || { show "$name"; fail "$name: the refusal aborted MPI"; }
  ! grep -q "^data: " "$tmp/$name.out" || { show "$name"; fail "$name: the data was loaded before the refusal"; }
  [[ $(files) == "$before" ]] || { diff <(echo "$before") <(files) >&2 || true; fail "$name: the run's files changed"; }
  echo "ok: run again${change:+ with $change}: refused, nothing rewritten ($(grep -m1 -o 'error: .*' "$tmp/$name.err" | cut -c1-90)...)"
done

# The same refusal, as early, when the finished run's model.pt is gone: what marks a finished run
# is its checkpoint's position, as in the loop.
mv "$tmp/runs/r/model.pt" "$tmp/model.pt.away"
gone=$(files)
run 120 again_nomodel "${np2[@]}" train.epochs=2
[[ $rc == 1 ]] || { show again_nomodel; fail "again_nomodel: a finished run without model.pt run again: exit $rc, expected 1"; }
grep -qF "this run has finished: its checkpoint is at step 32, the end of training (train.epochs 2)" "$tmp/again_nomodel.err" ||
  { show again_nomodel; fail "again_nomodel: not the finished run's error"; }
[[ $(grep -c "error: " "$tmp/again_nomodel.err") == 1 ]] || { show again_nomodel; fail "again_nomodel: the error is not printed once"; }
! grep -q "^data: " "$tmp/again_nomodel.out" || { show again_nomodel; fail "again_nomodel: the data was loaded before the refusal"; }
[[ $(files) == "$gone" ]] || fail "again_nomodel: the run's files changed"
mv "$tmp/model.pt.away" "$tmp/runs/r/model.pt"
echo "ok: run again without model.pt: refused before the data is loaded, with the same error"

run 120 more "${np2[@]}" train.epochs=3
[[ $rc == 0 ]] || { show more; fail "train.epochs 3 after 2: exit $rc"; }
grep -q "resumed from .*step-000000032 at step 32" "$tmp/more.out" || { show more; fail "did not resume at step 32"; }
grep -q '"type": *"resume"' "$tmp/runs/r/metrics.jsonl" || fail "metrics.jsonl has no resume record"
[[ -d $tmp/runs/r/checkpoints/step-000000048 ]] || fail "epoch 3 was not trained to step 48"
echo "ok: train.epochs 3 resumed at step 32 and trained to 48, appending to metrics.jsonl"
# The report spans the whole run; its counts and rates are this process's, each named.
grep -qE "^done: 48 steps \(16 in this process, resumed at step 32\), 2048 samples in [0-9.]+ s: [0-9]+ samples/s steady \(from step 41\), [0-9]+ samples/s overall" \
  "$tmp/runs/r/report.txt" || { cat "$tmp/runs/r/report.txt" >&2; fail "report.txt: the closing line does not count this process alone"; }
"$py" - "$tmp/runs/r/report.html" "$tmp/runs/r/metrics.jsonl" <<'PY' || fail "report.html does not chart the whole run"
import json, sys
page = open(sys.argv[1]).read()
start = page.index('<script type="application/json" id="data">') + len('<script type="application/json" id="data">')
data = json.loads(page[start:page.index("</script>", start)])
steps = data["train"]["step"]
assert steps == [8, 16, 24, 32, 40, 48], steps
summary = [json.loads(l) for l in open(sys.argv[2]) if '"summary"' in l][-1]
assert summary["run_samples"] == 2048 and summary["samples"] == 6144, summary
assert summary["steady_from_step"] == 41 and summary["steady_samples_per_s"] > 0, summary
print("report.html charts steps", steps)
PY
echo "ok: the resumed run's report charts steps 8-48 and counts the 2048 samples this process trained"
# metrics.csv: one header, then a row per train and eval record of metrics.jsonl, the resumed
# run's appended, each number the same double.
"$py" - "$tmp/runs/r/metrics.csv" "$tmp/runs/r/metrics.jsonl" <<'PY' || fail "metrics.csv does not hold metrics.jsonl's records"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
recs = [r for r in map(json.loads, open(sys.argv[2])) if r["type"] in ("train", "eval")]
assert len(rows) == len(recs) and len(recs) >= 6, (len(rows), len(recs))
names = {"train_loss": "loss"}
for row, rec in zip(rows, recs):
    assert row["type"] == rec["type"], (row, rec)
    for col, cell in row.items():
        if col == "type":
            continue
        key = names.get(col, col) if rec["type"] == "train" else col
        if key == "loss" and rec["type"] != "train":
            key = None
        want = rec.get(key) if key else None
        assert (cell == "") == (want is None), (col, cell, want)
        if want is not None:
            assert float(cell) == float(want), (col, cell, want)
print("metrics.csv:", len(rows), "rows, the steps", [int(r["step"]) for r in rows if r["type"] == "train"])
PY
echo "ok: metrics.csv holds metrics.jsonl's train and eval records, the resumed run's appended"

# Training on after a cosine run's end says what the schedule does: stretch (the default) takes
# the schedule of a 48-step run at step 33; restart begins a new cosine over the 16 added steps.
# The learning rates of metrics.jsonl's steps 33-48 are those formulas' (lr 0.01).
one=("$bin" "$cfg" run.dir="$tmp/runs" data.synthetic_size=2048 train.global_batch=128 train.eval=false
     train.schedule=cosine run.log_every=1)
run 120 cos "${one[@]}" run.name=cos train.epochs=2
[[ $rc == 0 ]] || { show cos; fail "the cosine run: exit $rc"; }
cp -r "$tmp/runs/cos" "$tmp/runs/cos_restart"
run 120 cos_stretch "${one[@]}" run.name=cos train.epochs=3
run 120 cos_restart "${one[@]}" run.name=cos_restart train.epochs=3 train.resume_schedule=restart
for name in cos_stretch cos_restart; do
  [[ $rc == 0 ]] || { show $name; fail "$name: exit $rc"; }
done
"$py" - "$tmp/runs" "$tmp/cos_stretch.out" "$tmp/cos_restart.out" <<'PY' || fail "the resume's learning rates are not the schedule's"
import json, math, sys
runs, stretch_out, restart_out = sys.argv[1:4]
lr = 0.01
cos = lambda t, n: lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t / n)))
before = cos(31, 32)  # step 32, the last of the 32-step run (index 31)
expect = {"cos": lambda s: cos(s - 1, 48), "cos_restart": lambda s: cos(s - 33, 16)}
lines = {"cos": open(stretch_out).read(), "cos_restart": open(restart_out).read()}
says = {"cos": "learning rate at the resume: %.3g after step 32 -> %.3g at step 33: the cosine schedule of a 48-step run "
               "(train.resume_schedule stretch; restart would start a new schedule over the 16 added steps)" % (before, cos(32, 48)),
        "cos_restart": "learning rate at the resume: %.3g after step 32 -> %.3g at step 33: train.resume_schedule restart: "
                       "a new cosine schedule over the 16 added steps" % (before, lr)}
for run, f in expect.items():
    assert says[run] in lines[run], (run, says[run])
    recs = [json.loads(l) for l in open(f"{runs}/{run}/metrics.jsonl")]
    got = {r["step"]: r["lr"] for r in recs if r["type"] == "train" and r["step"] > 32}
    assert sorted(got) == list(range(33, 49)), sorted(got)
    for s, v in got.items():
        assert abs(v - f(s)) <= 1e-12 + 1e-9 * f(s), (run, s, v, f(s))
    print(run, "steps 33-48: lr", round(got[33], 6), "...", round(got[48], 9), "as the formula")
PY
echo "ok: training on after the end: $(grep -o 'learning rate at the resume.*' "$tmp/cos_restart.out")"
echo "PASS"
