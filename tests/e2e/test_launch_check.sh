#!/usr/bin/env bash
# e2e: dtrain checks the launcher's rank numbers against MPI's before it trains or writes
# anything. One process with srun's variables for task 2 of 4 and a PMI rank (as when srun starts
# tasks that do not join one MPI job: each is MPI rank 0 of 1) must stop with the MPI/PMI error,
# both sets of numbers and the fix, and write no run directory; the same task without any PMI
# (srun --mpi=none) is refused before MPI starts, naming the task and the fix; srun's numbers that
# agree with MPI's run; under mpirun, Open MPI's variables win over SLURM_* inherited from an
# allocation. (tests/e2e/test_slurm.sh runs the same cases under a real Slurm.)
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup launchcheck
cfg=$src/configs/synthetic_linear.yaml
short=(train.epochs=1 data.synthetic_size=256 run.log_every=0)

run 60 bad env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_PROCID=2 SLURM_LOCALID=2 PMI_RANK=2 \
  "$bin" "$cfg" run.dir="$tmp/bad" "${short[@]}"
[[ $rc != 0 ]] || { show bad; fail "srun task 2 of 4 seen by MPI as rank 0 of 1: exit 0"; }
for s in "error: the MPI/PMI setup is wrong" "task 2 of 4 (local task 2" \
         "MPI sees rank 0 of 1 (local rank 0)" "srun --mpi=pmix"; do
  grep -qF -- "$s" "$tmp/bad.err" || { show bad; fail "the error lacks '$s'"; }
done
[[ ! -e $tmp/bad ]] || fail "a run directory was written before the check stopped the run"
echo "ok: mismatch stops the run (exit $rc): $(grep -o 'error: .*' "$tmp/bad.err" | cut -c1-150)..."

run 60 nopmi env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_PROCID=2 SLURM_LOCALID=2 \
  "$bin" "$cfg" run.dir="$tmp/nopmi" "${short[@]}"
[[ $rc == 1 ]] || { show nopmi; fail "srun task 2 of 4 without PMI: exit $rc, expected 1"; }
for s in "[task 2] error: srun started this process as task 2 of 4 without PMIx or PMI" \
         "srun --mpi=pmix" "DTRAIN_SRUN_ARGS=--mpi=pmix"; do
  grep -qF -- "$s" "$tmp/nopmi.err" || { show nopmi; fail "the error lacks '$s'"; }
done
[[ ! -e $tmp/nopmi ]] || fail "a run directory was written by a task without PMI"
echo "ok: no PMI is refused before MPI starts: $(grep -o 'error: .*' "$tmp/nopmi.err" | cut -c1-120)..."

run 120 good env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=1 SLURM_PROCID=0 SLURM_LOCALID=0 PMI_RANK=0 \
  "$bin" "$cfg" run.dir="$tmp/good" "${short[@]}"
[[ $rc == 0 ]] || { show good; fail "srun task 0 of 1, MPI rank 0 of 1: exit $rc"; }
echo "ok: agreeing srun numbers run"

# mpirun inside an allocation: the ranks inherit the SLURM_* of the srun that started Open MPI's
# daemon; Open MPI's own variables are the ones checked.
run 180 mpirun env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=1 SLURM_PROCID=0 SLURM_LOCALID=0 \
  "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" run.dir="$tmp/mpirun" "${short[@]}"
[[ $rc == 0 ]] || { show mpirun; fail "mpirun -np 2 with inherited SLURM_* variables: exit $rc"; }
echo "ok: under mpirun, OMPI_COMM_WORLD_* are checked, inherited SLURM_* are not"
echo "PASS"
