#!/usr/bin/env bash
# cluster tier: a Slurm job across two nodes stopped, requeued and resumed (slurm.sh: a slurmd in
# each node, slurmctld on the host side of the bridge). `sbatch -N 2 --ntasks-per-node=2
# launch/dtrain-slurm.sbatch` trains 4 ranks, 2 on each node, through `srun --mpi=pmix`;
#   - `scancel --signal=USR1` (what --signal=USR1@N sends before the time limit) reaches every
#     task on both nodes: each rank writes its part of one checkpoint, exit 75, the script
#     requeues the job, and the requeued job (restart 1) resumes from it on the 2 nodes and ends
#     bit for bit as an uninterrupted job of the same command (model and optimizer state);
#   - the checkpoint the 4 ranks of the two nodes wrote at the stop is resumed by a job of one node
#     (`sbatch -N 1 --ntasks-per-node=4`, on dtrain-n2, the checkpoint in its run's folder), which
#     ends bit for bit as the uninterrupted job too (the same world: the hosts change no sum).
# Slurm holds a requeued job for 2 minutes (its BeginTime); the test releases it at once
# (tests/slurm/cluster.sh's slurm_release), as an administrator can.
# Needs root, iproute2, slurm-wlm and munge. Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR,
# DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/slurm.sh"
# 4 CPUs a node (SlurmdParameters=config_overrides): room for the 4 tasks of the one-node job.
cluster_slurm_setup requeue 2 4

steps=120
common=("${recipe[@]}" run.log_every=5 train.max_steps=$steps train.global_batch=128)

# submit LOG [sbatch options] -- [overrides]: the job id; its output in $tmp/LOG.log.
submit() {
  local log=$1 opts=()
  shift
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  (cd "$src" && sbatch --parsable --gpus-per-node=0 --cpus-per-task=1 --output="$tmp/$log.log" "${opts[@]}" \
    launch/dtrain-slurm.sbatch "$cfg" "${common[@]}" "$@") | cut -d';' -f1
}
completed() {  # completed ID LOG SECS: the job ends COMPLETED
  wait_job_state "$1" "$3" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY
  local state
  state=$(job_field "$1" JobState)
  [[ $state == COMPLETED ]] || { joblog "$2"; tail -n 20 "$tmp"/slurm/log/*.log >&2; fail "job $1 ($2) ended $state"; }
}

# ---- the uninterrupted job --------------------------------------------------------------------
start=$(date +%s)
whole=$(submit whole -N 2 --ntasks-per-node=2 -- run.name=whole)
completed "$whole" whole 180
log_has whole "2 node(s) x 2 rank(s)" "world 4 rank(s) on 2 hosts: dtrain-n1 (ranks 0-1), dtrain-n2 (ranks 2-3)" "dtrain: exit 0"
end_whole=$(checkpoint whole $steps)
echo "ok: job $whole: 4 ranks on dtrain-n1, dtrain-n2 trained $steps steps uninterrupted ($(($(date +%s) - start)) s)"

# ---- USR1 to the job's tasks: checkpoint, exit 75, requeue, resume on the 2 nodes -------------------
job=$(submit preempt -N 2 --ntasks-per-node=2 -- run.name=preempt)
wait_for_training "$tmp/runs/preempt"
scancel --signal=USR1 "$job"
for _ in $(seq 1 120); do [[ $(job_field "$job" Restarts) == 1 ]] && break; sleep 0.5; done
[[ $(job_field "$job" Restarts) == 1 ]] || { joblog preempt; fail "job $job was not requeued after USR1"; }
log_has preempt "stopped by SIGUSR1 after step" "dtrain: stopped after writing a checkpoint (exit 75); requeueing job $job"
# The stop reads as one: no Open MPI exit block, none of srun's lines about the tasks' exit 75.
if grep -qE "Primary job +terminated normally|mpirun detected that one or more processes|MPI_ABORT was invoked|Exited with exit code 75|Terminating StepId" "$tmp/preempt.log"; then
  joblog preempt
  fail "the job's output holds an exit block of Open MPI or srun"
fi
step=$(sed -nE 's/.*stopped by SIGUSR1 after step ([0-9]+).*/\1/p' "$tmp/preempt.log" | head -1)
((step > 0 && step < steps)) || { joblog preempt; fail "the job stopped at step '$step' (of $steps)"; }
ck=$(checkpoint preempt "$step")
for r in 0 1 2 3; do
  [[ -f $(printf '%s/rank-%05d.pt' "$ck" "$r") ]] || fail "$ck lacks rank $r's file"
done
grep -h "stopped by SIGUSR1\|requeueing job" "$tmp/preempt.log"
# The checkpoint copied for the one-node job, where its checkpoint.resume=auto (the script's)
# finds it: the folder of checkpoints of its run, run.name=one (a path on the command line would
# set checkpoint.resume twice, which dtrain refuses).
mkdir -p "$tmp/runs/one/checkpoints"
cp -a "$ck" "$tmp/runs/one/checkpoints/"
ck_one=$tmp/runs/one/checkpoints/$(basename "$ck")
slurm_release "$job"
completed "$job" preempt 180
log_has preempt "(restart 1)" "resumed from $ck at step $step" "dtrain: exit 0"
[[ $(job_field "$job" Restarts) == 1 ]] || fail "job $job restarted $(job_field "$job" Restarts) times, expected once"
grep -h "(restart 1)\|resumed from" "$tmp/preempt.log" | head -2
same_model "$(checkpoint preempt $steps)" "$end_whole"
echo "ok: job $job: USR1 on 2 nodes -> checkpoint at step $step, exit 75, requeued, restart 1 resumed it and ended as job $whole"

# ---- the 2-node job's checkpoint resumed by a one-node job ------------------------------------------
one=$(submit one -N 1 --ntasks-per-node=4 --nodelist=dtrain-n2 -- run.name=one)
completed "$one" one 180
log_has one "1 node(s) x 4 rank(s)" "world 4 rank(s) on 1 host: dtrain-n2 (ranks 0-3)" "resumed from $ck_one at step $step" "dtrain: exit 0"
grep -h "world 4 rank(s)\|resumed from" "$tmp/one.log" | head -2
grep -qF '4 rank(s) on dtrain-n2' "$tmp/runs/one/report.html" || fail "report.html of the one-node job does not say 4 ranks on dtrain-n2"
end_one=$(checkpoint one $steps)
moved "$ck_one" "$end_one"
same_model "$end_one" "$end_whole"
echo "ok: job $one: the checkpoint of step $step (4 ranks on 2 nodes) resumed by 4 ranks on dtrain-n2 alone ends as job $whole"
echo "PASS"
