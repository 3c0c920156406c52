#!/usr/bin/env bash
# e2e: the watchdog names the rank that stopped. On 3 ranks, rank 1 stalls in a hook after step
# 3 (dtrain_e2e_hook_stalls) while ranks 0 and 2 wait in the next step's all-reduce; with
# run.timeout_s=3 the job must end within seconds, non-zero, with a message naming rank 1 and
# its last phase and step, and where the others wait. Twice: rank 1's training thread asleep
# (its watchdog still answers), and rank 1's whole process stopped (SIGSTOP: it cannot answer).
# Env (set by ctest): DTRAIN_HOOK_STALLS (the program), DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup watchdog
stalls=${DTRAIN_HOOK_STALLS:?"DTRAIN_HOOK_STALLS (build/tests/dtrain_e2e_hook_stalls) is not set"}
[[ -x $stalls ]] || fail "not built: $stalls"
stray() { pgrep -f "^$stalls $1" || true; }  # this build's processes only

for mode in sleep freeze; do
  start=$(date +%s)
  run 90 "$mode" "$mpiexec" "${mpi_flags[@]}" -np 3 "$stalls" "$mode" run.timeout_s=3
  took=$(($(date +%s) - start))
  [[ $rc != 0 ]] || { show "$mode"; fail "$mode: the job exited 0 although rank 1 stalled"; }
  err=$tmp/$mode.err
  grep -q "watchdog: no progress on this rank for [0-9]* s (run.timeout_s = 3)" "$err" ||
    { show "$mode"; fail "$mode: no watchdog message"; }
  if [[ $mode == sleep ]]; then
    grep -q "rank 1 has not beaten for [0-9]* s (last phase: hooks: on_step at step 3)" "$err" ||
      { show "$mode"; fail "sleep: the message does not name rank 1, its phase and step"; }
    grep -q "ranks 0,2 wait in .* at step 4" "$err" ||
      { show "$mode"; fail "sleep: the message does not say where ranks 0 and 2 wait"; }
  else
    grep -q "rank 1 does not answer (no heartbeat within" "$err" ||
      { show "$mode"; fail "freeze: the message does not name rank 1 as not answering"; }
  fi
  (( took < 45 )) || fail "$mode: the job took ${took} s to end (timeout 3 s)"
  # Every process gone within a second of the job's end.
  for _ in $(seq 1 10); do
    left=$(stray "$mode")
    [[ -n $left ]] || break
    sleep 0.1
  done
  if [[ -n $left ]]; then
    for p in $left; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done
    fail "$mode: processes left behind: $left"
  fi
  echo "ok: $mode: the job ended in ${took} s (exit $rc): $(grep -o 'watchdog: .*' "$err" | head -n1)"
done
echo "PASS"
