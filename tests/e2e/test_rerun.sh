#!/usr/bin/env bash
# e2e: a rerun never destroys. The same command run again on a finished run, or run again with a
# changed training key (train.lr), is refused before anything is written: exit 1, one error line
# per rank naming the checkpoint, the step and the fix, and every file of the run directory
# byte for byte as it was. With more to train (a higher train.epochs) it resumes and appends.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup rerun
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
  [[ $(files) == "$before" ]] || { diff <(echo "$before") <(files) >&2 || true; fail "$name: the run's files changed"; }
  echo "ok: run again${change:+ with $change}: refused, nothing rewritten ($(grep -m1 -o 'error: .*' "$tmp/$name.err" | cut -c1-90)...)"
done

run 120 more "${np2[@]}" train.epochs=3
[[ $rc == 0 ]] || { show more; fail "train.epochs 3 after 2: exit $rc"; }
grep -q "resumed from .*step-000000032 at step 32" "$tmp/more.out" || { show more; fail "did not resume at step 32"; }
grep -q '"type": *"resume"' "$tmp/runs/r/metrics.jsonl" || fail "metrics.jsonl has no resume record"
[[ -d $tmp/runs/r/checkpoints/step-000000048 ]] || fail "epoch 3 was not trained to step 48"
echo "ok: train.epochs 3 resumed at step 32 and trained to 48, appending to metrics.jsonl"
echo "PASS"
