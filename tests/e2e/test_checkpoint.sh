#!/usr/bin/env bash
# e2e: a dtrain run survives what clusters do to it.
#   - SIGTERM or SIGUSR1 to one rank, or Ctrl-C to launch/mpirun-local.sh: every rank saves the
#     same checkpoint, prints the summary and exits 75 (no model.pt: the run has not ended); the
#     same command resumes it, and the result equals an uninterrupted run's, bit for bit
#     (compared with PyTorch's torch.load);
#   - kill -9 of one rank of three: the job ends within the bound, the last complete checkpoint
#     loads, and a rerun with checkpoint.resume=auto ends like an uninterrupted run;
#   - a second Ctrl-C ends at once; a second run of a busy run directory is refused.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS,
# DTRAIN_REF_PYTHON).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup checkpoint
e2e_torch_python

cfg=$src/configs/synthetic_linear.yaml
# 128 steps per epoch; the learning rate is constant, so a run may be resumed with more epochs.
common=(run.dir="$tmp/runs" run.log_every=20 data.workers=0 run.timeout_s=60 train.eval=false)

# rank_pids NAME: the dtrain processes of run NAME.
rank_pids() {
  pgrep -f "run.name=$1" | while read -r p; do [[ $(cat /proc/$p/comm 2>/dev/null) == dtrain ]] && echo "$p"; done
}

# stopped_step NAME: the step a stopped run's summary names ("stopped by SIGTERM after step N").
stopped_step() {
  sed -nE 's/.*stopped by SIG[A-Z0-9]+ after step ([0-9]+).*/\1/p' "$tmp/$1.out" | head -1
}

# signal_case NAME NP SIGNAL WHO: start a long run, send SIGNAL to WHO (rank1 | mpirun | group)
# once it trains, expect exit 75 and a checkpoint at the stop step on every rank's behalf; then
# resume to a fixed end and compare with an uninterrupted run of that length.
signal_case() {
  local name=$1 np=$2 sig=$3 who=$4
  if [[ $who == ctrl-c ]]; then
    # As from a terminal: launch/mpirun-local.sh in a session of its own with SIGINT at its
    # default (a background job of a script would ignore it), then SIGINT to the whole group.
    DTRAIN_BIN=$bin timeout -k 10 120 "$pyexe" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' \
      bash "$src/launch/mpirun-local.sh" "$np" "$cfg" "${common[@]}" \
      run.name="$name" train.epochs=300 >"$tmp/$name.out" 2>"$tmp/$name.err" &
  else
    timeout -k 10 120 "$mpiexec" "${mpi_flags[@]}" -np "$np" "$bin" "$cfg" "${common[@]}" \
      run.name="$name" train.epochs=300 >"$tmp/$name.out" 2>"$tmp/$name.err" &
  fi
  local job=$!
  wait_for_training "$tmp/runs/$name"
  sleep 0.5
  case $who in
    rank1) mapfile -t pids < <(rank_pids "$name"); kill -"$sig" "${pids[1]}" ;;
    # What a terminal's Ctrl-C does: the signal to the script's whole process group.
    ctrl-c) kill -"$sig" -- -"$(pgrep -P "$job" | head -1)" ;;
  esac
  local rc=0
  wait "$job" || rc=$?
  [[ $rc == 75 ]] || { show "$name"; fail "$name: $sig to $who: exit $rc, expected 75 (preempted, checkpoint written)"; }
  local step
  step=$(stopped_step "$name")
  [[ -n $step ]] || { show "$name"; fail "$name: the summary does not say where it stopped"; }
  local ck
  ck=$(printf '%s/runs/%s/checkpoints/step-%09d' "$tmp" "$name" "$step")
  [[ -f $ck/COMPLETE ]] || fail "$name: no complete checkpoint $ck"
  for r in $(seq 0 $((np - 1))); do
    [[ -f $(printf '%s/rank-%05d.pt' "$ck" "$r") ]] || fail "$name: $ck lacks rank $r's file"
  done
  # Stopped before its end: no model.pt for eval or predict to take as the result.
  [[ ! -e $tmp/runs/$name/model.pt ]] || fail "$name: the stopped run wrote model.pt"
  grep -q "after step $step of [0-9]*: checkpoint .* written, no model.pt (the run has not ended)" "$tmp/$name.out" ||
    { show "$name"; fail "$name: the stopped run does not say it wrote no model.pt"; }
  # A stop is short: one summary line, no bucket lines, the diagnosis in report.txt only.
  ! grep -qE "^diagnosis:|gradient buckets of the last step" "$tmp/$name.out" ||
    { show "$name"; fail "$name: the stop printed the diagnosis or the bucket timeline"; }
  grep -q "^diagnosis:" "$tmp/runs/$name/report.txt" || fail "$name: no diagnosis in report.txt"
  # One line for the stop, from rank 0: no rank announces the signal's requests.
  ! grep -q "asks to stop\|asks to save" "$tmp/$name.out" ||
    { show "$name"; fail "$name: the ranks announced the stop signal's requests"; }
  # Resume to the end of the next epoch but one, and compare with a run that never stopped.
  local epochs=$(( step / 128 + 2 ))
  run 120 "$name-resume" "$mpiexec" "${mpi_flags[@]}" -np "$np" "$bin" "$cfg" "${common[@]}" \
    run.name="$name" train.epochs=$epochs
  [[ $rc == 0 ]] || { show "$name-resume"; fail "$name: resuming failed (exit $rc)"; }
  grep -q "resumed from $ck at step $step" "$tmp/$name-resume.out" ||
    { show "$name-resume"; fail "$name: the resumed run does not say where it resumed from"; }
  [[ -s $tmp/runs/$name/model.pt ]] || fail "$name: the resumed run ended without model.pt"
  # The uninterrupted run of that length, shared by the cases that stopped in the same epoch (the
  # same command but run.name, which changes no result).
  local whole=whole-np$np-e$epochs
  if [[ ! -d $tmp/runs/$whole ]]; then
    run 120 "$whole" "$mpiexec" "${mpi_flags[@]}" -np "$np" "$bin" "$cfg" "${common[@]}" \
      run.name="$whole" train.epochs=$epochs
    [[ $rc == 0 ]] || { show "$whole"; fail "$name: the uninterrupted run failed (exit $rc)"; }
  fi
  local end
  end=$(printf 'step-%09d' $((epochs * 128)))
  same_model "$tmp/runs/$name/checkpoints/$end" "$tmp/runs/$whole/checkpoints/$end"
  echo "$name: $sig to $who stopped at step $step with exit 75; resumed to step $((epochs * 128)) = uninterrupted"
}

signal_case term 2 TERM rank1
signal_case usr1 2 USR1 rank1
signal_case ctrlc 2 INT ctrl-c

# kill -9 of one rank of three while it saves every 25 steps (global batch 129 = 3 x 43: 127
# steps per epoch).
three=(train.global_batch=129 checkpoint.every_steps=25)
name=killed
start=$(date +%s)
timeout -k 10 120 "$mpiexec" "${mpi_flags[@]}" -np 3 "$bin" "$cfg" "${common[@]}" run.name=$name \
  "${three[@]}" train.epochs=300 >"$tmp/$name.out" 2>"$tmp/$name.err" &
job=$!
wait_for_training "$tmp/runs/$name"
sleep 1
mapfile -t pids < <(rank_pids $name)
kill -9 "${pids[2]}"
rc=0
wait "$job" || rc=$?
elapsed=$(( $(date +%s) - start ))
# mpirun ends with the killed rank's status (137) or its own error; 124 would be the timeout.
[[ $rc != 0 && $rc != 124 ]] || { show $name; fail "$name: exit $rc after kill -9 of a rank"; }
(( elapsed < 90 )) || fail "$name: the job took ${elapsed} s to end after a rank was killed"
newest=$(ls -d "$tmp/runs/$name/checkpoints"/step-* | sort | tail -1)
[[ -n $newest ]] || fail "$name: no checkpoint was written before the kill"
# The newest folder may be a save the kill interrupted; resume takes the newest complete one.
step=$(ls -d "$tmp/runs/$name/checkpoints"/step-*/COMPLETE | sort | tail -1 | sed -E 's/.*step-0*([0-9]+)\/COMPLETE/\1/')
epochs=$(( step / 127 + 2 ))
run 120 killed-resume "$mpiexec" "${mpi_flags[@]}" -np 3 "$bin" "$cfg" "${common[@]}" run.name=$name \
  "${three[@]}" train.epochs=$epochs checkpoint.resume=auto
[[ $rc == 0 ]] || { show killed-resume; fail "$name: resuming after the kill failed (exit $rc)"; }
grep -q "at step $step" "$tmp/killed-resume.out" || { show killed-resume; fail "$name: did not resume at step $step"; }
run 120 killed-whole "$mpiexec" "${mpi_flags[@]}" -np 3 "$bin" "$cfg" "${common[@]}" \
  run.name=$name-whole "${three[@]}" train.epochs=$epochs
[[ $rc == 0 ]] || { show killed-whole; fail "$name: the uninterrupted run failed (exit $rc)"; }
end=$(printf 'step-%09d' $((epochs * 127)))
same_model "$tmp/runs/$name/checkpoints/$end" "$tmp/runs/$name-whole/checkpoints/$end"
# The killed run had logged steps past its last checkpoint; the resumed run trained them again:
# metrics.csv keeps one row per step (metrics.jsonl keeps both, after its resume record).
"$py" - "$tmp/runs/$name/metrics.csv" "$step" <<'PY' || fail "$name: metrics.csv repeats steps after the resume"
import csv, sys
steps = [int(r["step"]) for r in csv.DictReader(open(sys.argv[1])) if r["type"] == "train"]
assert len(steps) == len(set(steps)) and steps == sorted(steps), steps
assert max(steps) > int(sys.argv[2]), (sys.argv[2], steps[-5:])  # the resumed run's rows are there
PY
echo "$name: job ended ${elapsed} s after kill -9; resumed from step $step; result = uninterrupted"

# A second Ctrl-C ends at once, without waiting for a checkpoint. The stop's checkpoint is paced
# to a few KB/s so that the second one comes while it is written (a stop that has finished keeps
# its exit 75: a late Ctrl-C does not replace it).
timeout -k 10 60 "$bin" "$cfg" "${common[@]}" run.name=twice train.epochs=300 \
  checkpoint.write_mb_per_s=0.002 \
  >"$tmp/twice.out" 2>"$tmp/twice.err" &
job=$!
wait_for_training "$tmp/runs/twice"
pid=$(rank_pids twice)
kill -INT "$pid"; sleep 0.05; kill -INT "$pid"
rc=0
wait "$job" || rc=$?
[[ $rc == 130 ]] || { show twice; fail "twice: exit $rc after two SIGINTs, expected 130"; }
grep -q "second interrupt" "$tmp/twice.err" || { show twice; fail "twice: no word about the second interrupt"; }

# A run directory in use: the second run is refused and names the first.
timeout -k 10 60 "$bin" "$cfg" "${common[@]}" run.name=busy train.epochs=300 \
  >"$tmp/busy1.out" 2>"$tmp/busy1.err" &
job=$!
wait_for_training "$tmp/runs/busy"
holder=$(rank_pids busy)
run 60 busy2 "$bin" "$cfg" "${common[@]}" run.name=busy
kill -TERM "$holder"; wait "$job" || true
[[ $rc != 0 ]] || fail "busy: a second run of a busy run directory started"
grep -q "in use by another dtrain run (pid $holder" "$tmp/busy2.err" || { show busy2; fail "busy: the error does not name the run holding the directory"; }
echo "second Ctrl-C and busy run directory: as expected"
