#!/usr/bin/env bash
# e2e: a rank killed with SIGKILL in the middle of training must end the whole job, quickly and
# with a non-zero exit: no surviving rank may wait forever in a collective.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup kill
tag="killtest$$"

# Long enough that it is still training when a rank is killed; the watchdog is set high so that
# it is the launcher noticing the dead rank, not the watchdog, that ends the job.
start=$(date +%s)
timeout -k 10 120 "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/synthetic_linear.yaml" \
  run.name="$tag" run.dir="$tmp" train.epochs=1000 data.synthetic_size=65536 run.log_every=0 \
  run.timeout_s=600 >"$tmp/out" 2>"$tmp/err" &
job=$!
victim=""
for _ in $(seq 1 100); do  # wait until both ranks run, then pick one
  mapfile -t pids < <(pgrep -f "run.name=$tag" | while read -r p; do
    [[ $(cat /proc/$p/comm 2>/dev/null) == dtrain ]] && echo "$p"; done)
  if [[ ${#pids[@]} -ge 2 ]]; then victim=${pids[1]}; break; fi
  sleep 0.2
done
[[ -n $victim ]] || { kill "$job" 2>/dev/null; fail "the two ranks did not start"; }
sleep 2
kill -9 "$victim"
rc=0
wait "$job" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc != 124 ]] || fail "job still running 120 s after a rank was killed (hang)"
[[ $rc != 0 ]] || fail "job exited 0 although a rank was killed"
[[ $elapsed -lt 60 ]] || fail "job took ${elapsed} s to end after a rank was killed"
echo "killed rank $victim; job ended with exit $rc after ${elapsed} s"
