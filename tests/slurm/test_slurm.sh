#!/usr/bin/env bash
# slurm tier: launch/dtrain-slurm.sbatch under a real Slurm (Debian's slurm-wlm 22.05 and munge),
# started by this test as a one-node cluster of its own (cluster.sh) and stopped at the end, also
# on failure. The script is submitted as a user would, from the repository root, with the options
# a CPU-only partition needs on the command line (--gpus-per-node=0, --cpus-per-task=1, one node
# of 2 tasks); every job trains 2 CPU ranks through `srun --mpi=pmix` (the cluster's MpiDefault).
#   a. a job trains to the end: exit 0, 2 ranks in one MPI job; it is the reference;
#   b. `scancel --signal=USR1` (what --signal=USR1@N sends before the time limit) to a running
#      job: every rank checkpoints, exit 75, the script requeues the job, the requeued job
#      (restart 1) resumes from the checkpoint;
#   e. `scancel` of that job while it trains again (SIGTERM to its tasks): a checkpoint, which a
#      new job resumes, ending with the same model and optimizer state as (a), bit for bit;
#   c. a real time limit (--time=1 --signal=USR1@50) with nobody sending a signal: the same cycle
#      (as many times as the limit strikes), ending equal to (a), the uninterrupted job of its
#      length. slurmctld checks time limits every 30 s, so the signal comes 10 to 40 s after a
#      start: this job's checkpoints are paced (checkpoint.write_mb_per_s, about 1.2 s each) so that
#      it outlasts that while its ranks mostly wait, and it runs beside (a), (d), (b) and (e);
#   d. `srun --mpi=none` (DTRAIN_SRUN_ARGS): an error naming the task and the fix, exit 1 (a task
#      srun ends first, once the other exited, says nothing: 143), nothing trained, the run
#      directory of (a) unchanged.
# Slurm holds a requeued job for 2 minutes before it may start again (its BeginTime); the test
# releases it at once (`scontrol update jobid=N starttime=now`, cluster.sh's slurm_release), as an
# administrator can.
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../e2e/common.sh"
source "$here/cluster.sh"
e2e_setup slurm
releaser=
trap '[[ -z $releaser ]] || kill "$releaser" 2>/dev/null; slurm_cluster_stop "$tmp/"; rm -rf "$tmp"' EXIT
e2e_torch_python
export DTRAIN_BIN=$bin
# Two ranks of one job share the 2-core CI machine with a second job's: a rank that waits in MPI
# yields its core instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
slurm_cluster_start "$tmp/cluster" 8

cfg=$src/configs/synthetic_linear.yaml
# 128 steps per epoch (global batch 128, 64 per rank); one thread per rank, so that every job
# computes alike wherever Slurm puts it.
common=(run.threads=1 run.log_every=500 data.workers=0 train.eval=false run.timeout_s=60)
short=(train.epochs=40)  # 5,120 steps: about 8 s on 2 CPU ranks
# (c): the same steps, each epoch's checkpoint (rank 0 writes 15 kB) paced to about 1.2 s: about
# 55 s uninterrupted, most of it waiting.
paced=("${short[@]}" checkpoint.write_mb_per_s=0.012)

# submit LOG [sbatch options] -- [overrides]: the job id. The job's output goes to $tmp/LOG.log, its
# run under $runs ($tmp/runs; (c) has a folder of its own, so that (d) finds $tmp/runs unchanged).
runs=$tmp/runs
submit() {
  local log=$1 opts=()
  shift
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  (cd "$src" && sbatch --parsable --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 \
    --output="$tmp/$log.log" "${opts[@]}" launch/dtrain-slurm.sbatch "$cfg" run.dir="$runs" \
    "${common[@]}" "$@") | cut -d';' -f1
}
# final RUN [RUNS]: the run's newest checkpoint folder.
final() { ls -d "${2:-$runs}/$1/checkpoints"/step-* | sort | tail -1; }
ended() { wait_job_state "$1" "$2" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY; }
# wait_log LOG SECS TEXT: until the job's output holds TEXT.
wait_log() {
  for _ in $(seq 1 $(($2 * 4))); do
    grep -qF -- "$3" "$tmp/$1.log" 2>/dev/null && return 0
    sleep 0.25
  done
  joblog "$1"
  fail "$1: no '$3' in the job's output after $2 s"
}
held() { slurm_held "$1"; }
release() { slurm_release "$1"; }

# ---- c, started first: a real time limit; whoever requeues it, the releaser below starts it again --
timed=$(runs=$tmp/timed_runs submit timed --time=1 --signal=USR1@50 -- run.name=timed "${paced[@]}")
# In the background while (a), (d), (b) and (e) run: release each requeue of job $timed at once,
# until it ends (slurm_release: once the steps of its last run are gone).
(
  for _ in $(seq 1 1200); do
    case $(job_field "$timed" JobState) in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) exit 0 ;;
    esac
    held "$timed" && release "$timed"
    sleep 0.5
  done
) &
releaser=$!

# ---- a. a job that trains to its end -----------------------------------------------------------
plain=$(submit plain -- run.name=plain "${short[@]}")
ended "$plain" 120
[[ $(job_field "$plain" JobState) == COMPLETED ]] || { joblog plain; fail "a: job $plain ended $(job_field "$plain" JobState)"; }
log_has plain "world 2 rank(s)" "dtrain: exit 0" "restart 0"
end_plain=$(final plain)
[[ $end_plain == */step-000005120 ]] || fail "a: the last checkpoint is $end_plain, not step 5120"
echo "ok a: job $plain: 2 tasks through srun --mpi=pmix trained 5120 steps, exit 0"

# ---- d. srun --mpi=none ---------------------------------------------------------------------
before=$(cd "$tmp/runs" && find . -type f -exec md5sum {} + | sort)
nopmi=$(DTRAIN_SRUN_ARGS=--mpi=none submit nopmi -- run.name=plain "${short[@]}")
ended "$nopmi" 60
[[ $(job_field "$nopmi" JobState) == FAILED ]] || { joblog nopmi; fail "d: job $nopmi ended $(job_field "$nopmi" JobState)"; }
# Each task says it: "[task N] error: ..." and the fix, exit 1. A task that srun ends first
# (--kill-on-bad-exit, once the other's exit 1 reached it; seen on a loaded machine) says nothing:
# srun names it Terminated and the job's exit is srun's 143. At least one task must have said it.
said=0
for t in 0 1; do
  if grep -qF "[task $t] error: srun started this process as task $t of 2 without PMIx or PMI" "$tmp/nopmi.log"; then
    said=$((said + 1))
  elif ! grep -qE "srun: error: .*: task $t: Terminated" "$tmp/nopmi.log"; then
    joblog nopmi
    fail "d: task $t neither says that it has no PMI nor was ended by srun"
  fi
done
((said >= 1)) || { joblog nopmi; fail "d: no task says that it has no PMI"; }
log_has nopmi "srun --mpi=pmix"
if ((said == 2)); then log_has nopmi "dtrain: exit 1"; else log_has nopmi "dtrain: exit 143"; fi
after=$(cd "$tmp/runs" && find . -type f -exec md5sum {} + | sort)
[[ $before == "$after" ]] || fail "d: a job without PMI changed files under $tmp/runs"
echo "ok d: srun --mpi=none: '$(grep -m1 -o 'error: .*' "$tmp/nopmi.log" | cut -c1-90)...', nothing written"

# ---- b. USR1 to the tasks: checkpoint, exit 75, requeue, resume --------------------------------
job=$(submit preempt -- run.name=preempt "${short[@]}")
wait_for_training "$tmp/runs/preempt"
scancel --signal=USR1 "$job"
for _ in $(seq 1 120); do [[ $(job_field "$job" Restarts) == 1 ]] && break; sleep 0.5; done
[[ $(job_field "$job" Restarts) == 1 ]] || { joblog preempt; fail "b: job $job was not requeued after USR1"; }
log_has preempt "stopped by SIGUSR1 after step" "dtrain: stopped after writing a checkpoint (exit 75); requeueing job $job"
# The stop reads as a stop: dtrain's line and the script's, no Open MPI exit block (srun starts
# the ranks, not mpirun) and none of srun's lines about the tasks' exit 75 and the step's end.
if grep -qE "Primary job +terminated normally|mpirun detected that one or more processes|MPI_ABORT was invoked|Exited with exit code 75|Terminating StepId" "$tmp/preempt.log"; then
  joblog preempt
  fail "b: the job's output holds an exit block of Open MPI or srun"
fi
step_b=$(sed -nE 's/.*stopped by SIGUSR1 after step ([0-9]+).*/\1/p' "$tmp/preempt.log" | head -1)
release "$job"
wait_log preempt 60 "restart 1)"
wait_log preempt 60 "at step $step_b"
echo "ok b: job $job: USR1 -> checkpoint at step $step_b, exit 75, requeued, restart 1 resumed there"

# ---- e. scancel (SIGTERM to the tasks) of the training job; a new job resumes -------------------
scancel "$job"
ended "$job" 60
log_has preempt "stopped by SIGTERM after step"
step_e=$(sed -nE 's/.*stopped by SIGTERM after step ([0-9]+).*/\1/p' "$tmp/preempt.log" | head -1)
(( step_e > step_b && step_e < 5120 )) || { joblog preempt; fail "e: stopped at step $step_e (USR1 stopped at $step_b, the end is 5120)"; }
[[ -f $(printf '%s/runs/preempt/checkpoints/step-%09d/COMPLETE' "$tmp" "$step_e") ]] ||
  fail "e: no complete checkpoint at step $step_e"
again=$(submit preempt2 -- run.name=preempt "${short[@]}")
ended "$again" 120
[[ $(job_field "$again" JobState) == COMPLETED ]] || { joblog preempt2; fail "e: job $again ended $(job_field "$again" JobState)"; }
log_has preempt2 "at step $step_e" "dtrain: exit 0"
same_model "$(final preempt)" "$end_plain"
echo "ok e: scancel -> checkpoint at step $step_e; job $again resumed it; the result equals job $plain's"

# ---- c. a real time limit: Slurm's own USR1, requeue, resume, until done --------------------------
wait "$releaser" || true
releaser=
state=$(job_field "$timed" JobState)
[[ $state == COMPLETED ]] || { joblog timed; fail "c: job $timed ended $state"; }
restarts=$(job_field "$timed" Restarts)
((restarts >= 1)) || { joblog timed; fail "c: the time limit never stopped job $timed (restarts $restarts)"; }
log_has timed "stopped by SIGUSR1 after step" "requeueing job $timed" "restart $restarts)" "dtrain: exit 0"
same_model "$(final timed "$tmp/timed_runs")" "$end_plain"
echo "ok c: job $timed: the time limit stopped it $restarts time(s) (steps $(sed -nE 's/.*stopped by SIGUSR1 after step ([0-9]+).*/\1/p' "$tmp/timed.log" | tr '\n' ' ')), each resumed; the result equals job $plain's"
echo "PASS"
