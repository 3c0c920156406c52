#!/usr/bin/env bash
# cluster tier: launch/dtrain-slurm.sbatch under a real Slurm across two nodes (slurm.sh: a
# slurmd in each node, slurmctld on the host side of the bridge): `sbatch -N 2
# --ntasks-per-node=2` trains 4 ranks through `srun --mpi=pmix`, 2 on each node; it ends bit for
# bit as 4 ranks on the 2 nodes under mpirun (the same world, the same sums).
# Needs root, iproute2, slurm-wlm and munge. Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR,
# DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/slurm.sh"
cluster_slurm_setup slurm 2 2

common=("${recipe[@]}" run.log_every=10 train.max_steps=30 train.global_batch=128)
job=$(cd "$src" && sbatch --parsable -N 2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 \
  --output="$tmp/job.log" launch/dtrain-slurm.sbatch "$cfg" "${common[@]}" run.name=slurm | cut -d';' -f1)
wait_job_state "$job" 180 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL
state=$(job_field "$job" JobState)
[[ $state == COMPLETED ]] || { tail -n 40 "$tmp/job.log" >&2; tail -n 20 "$tmp"/slurm/log/*.log >&2; fail "job $job ended $state"; }
grep -h -E "^dtrain: job|world 4 rank|dtrain: exit" "$tmp/job.log"
grep -qF "2 node(s) x 2 rank(s)" "$tmp/job.log" || fail "the job does not say 2 nodes x 2 ranks"
grep -qF "world 4 rank(s) on 2 hosts: dtrain-n1 (ranks 0-1), dtrain-n2 (ranks 2-3)" "$tmp/job.log" || { tail -n 40 "$tmp/job.log" >&2; fail "not 4 ranks with rank 0 on dtrain-n1"; }
grep -qF '4 rank(s) on dtrain-n1, dtrain-n2' "$tmp/runs/slurm/report.html" || fail "report.html does not name both nodes"
echo "ok: sbatch -N 2 --ntasks-per-node=2: job $job trained 4 ranks on dtrain-n1, dtrain-n2 (report.html)"

hosts_run 120 mpi "$hostfile" "$cfg" "${common[@]}" run.name=mpi
[[ $rc == 0 ]] || { show mpi; fail "4 ranks under mpirun: exit $rc"; }
end_slurm=$(checkpoint slurm 30)
end_mpi=$(checkpoint mpi 30)
same_model "$end_slurm" "$end_mpi"
echo "ok: the Slurm job ends bit for bit as 4 ranks on the 2 nodes under mpirun"
echo "PASS"
