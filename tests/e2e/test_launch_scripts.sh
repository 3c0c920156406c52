#!/usr/bin/env bash
# e2e: the launch scripts. launch/mpirun-local.sh runs a real 2-rank CPU job (NP=2) with each
# rank bound to its share of the CPUs, and one rank per GPU when nvidia-smi lists GPUs (a fake
# one here, dry run); a config error shows dtrain's line and the exit code alone, a stop by
# SIGTERM exits 75 without Open MPI's exit block, and mpirun's "not enough slots" still shows; launch/mpirun-hosts.sh runs a real 2-rank job from a hostfile naming
# localhost with 2 slots, and builds -npernode from GPUS_PER_NODE (dry run);
# launch/dtrain-slurm.sbatch runs under fake srun and scontrol that record their arguments: srun
# gets the binary, the config, checkpoint.resume=auto and the overrides; exit 75 and 138 (SIGUSR1
# before dtrain could handle it) requeue the job, 0 and 1 do not; the exit code is passed on.
# (tests/slurm/test_slurm.sh runs the script under a real Slurm.)
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup launch
cfg=$src/configs/synthetic_linear.yaml
short=(train.epochs=1 data.synthetic_size=512 run.log_every=0)
fake=$tmp/fakebin
mkdir -p "$fake" "$tmp/gpus"
# No GPUs on this PATH, whatever the machine has; $tmp/gpus/nvidia-smi lists two.
printf '#!/bin/sh\nexit 0\n' >"$fake/nvidia-smi"
printf '#!/bin/sh\necho "GPU 0: Fake (UUID: GPU-0)"\necho "GPU 1: Fake (UUID: GPU-1)"\n' >"$tmp/gpus/nvidia-smi"
chmod +x "$fake/nvidia-smi" "$tmp/gpus/nvidia-smi"
export DTRAIN_BIN=$bin
nopath=$fake:$PATH
metrics() { [[ -s $1/metrics.jsonl ]] || fail "no metrics at $1/metrics.jsonl"; }

# ---- single node ----------------------------------------------------------------------------
run 180 local env PATH="$nopath" NP=2 bash "$src/launch/mpirun-local.sh" "$cfg" \
  run.dir="$tmp/local" run.name=l "${short[@]}"
[[ $rc == 0 ]] || { show local; fail "mpirun-local.sh: exit $rc"; }
grep -q "world 2 rank(s)" "$tmp/local.out" || { show local; fail "mpirun-local.sh: not 2 ranks"; }
metrics "$tmp/local/l"
cpus=$(nproc)
if ((cpus >= 2)); then
  grep -q -- "--map-by slot:PE=$((cpus / 2)) --bind-to hwthread" "$tmp/local.err" ||
    { show local; fail "mpirun-local.sh: ranks not bound to their share of the CPUs"; }
  grep -q "intra-op threads per rank: $((cpus / 2)) (run.threads = 0: the $((cpus / 2)) CPU(s) this process may use" "$tmp/local.out" ||
    { show local; fail "the threads per rank do not follow the binding"; }
fi
echo "ok: mpirun-local.sh ran 2 CPU ranks: $(grep -o '+ mpirun.*' "$tmp/local.err" | cut -c1-120)"
# Open MPI's exit blocks are left out, its other messages are not: a config error is dtrain's one
# line and the exit code; a stop (SIGTERM to the script: every rank checkpoints) exits 75 with no
# block; too few slots still shows mpirun's own message.
no_block() {  # NAME
  ! grep -qE "Primary job +terminated normally|mpirun detected that one or more processes|MPI_ABORT was invoked" \
    "$tmp/$1.err" || { show "$1"; fail "$1: Open MPI's exit block is shown"; }
}
run 120 local_bad env PATH="$nopath" NP=2 bash "$src/launch/mpirun-local.sh" "$cfg" train.lr=-1
[[ $rc == 1 ]] || { show local_bad; fail "mpirun-local.sh with a config error: exit $rc, not 1"; }
no_block local_bad
printf '%s\n' "[rank 0] error: train.lr: must be > 0, got -1.0 (command line 'train.lr=-1')" \
  "mpirun-local.sh: exit 1" | diff <(grep -v '^+ mpirun' "$tmp/local_bad.err") - ||
  fail "mpirun-local.sh with a config error: not dtrain's line and the exit code"
echo "ok: a config error under mpirun-local.sh: $(grep -v '^+ mpirun' "$tmp/local_bad.err" | tr '\n' '|')"
env PATH="$nopath" NP=2 bash "$src/launch/mpirun-local.sh" "$cfg" run.dir="$tmp/local" run.name=stop \
  train.epochs=1000 data.synthetic_size=4096 run.log_every=0 >"$tmp/local_stop.out" 2>"$tmp/local_stop.err" &
job=$!
wait_for_training "$tmp/local/stop"
kill -TERM "$job"
timeout 120 tail --pid="$job" -f /dev/null || fail "mpirun-local.sh did not stop within 120 s of SIGTERM"
rc=0
wait "$job" || rc=$?
[[ $rc == 75 ]] || { show local_stop; fail "mpirun-local.sh stopped by SIGTERM: exit $rc, not 75"; }
no_block local_stop
grep -q "^stopped by SIGUSR1 after step .*(exit code 75)$" "$tmp/local_stop.out" || { show local_stop; fail "no stop line"; }
tail -n 1 "$tmp/local_stop.err" | grep -qx "mpirun-local.sh: exit 75" || { show local_stop; fail "the last line is not the exit code"; }
echo "ok: a stop under mpirun-local.sh: $(grep -v '^+ mpirun' "$tmp/local_stop.err" | tr '\n' '|')"
run 120 local_slots env PATH="$nopath" OMPI_MCA_rmaps_base_oversubscribe=0 NP=2 DTRAIN_BIND=none DTRAIN_MPIRUN_ARGS="--host localhost:1" \
  bash "$src/launch/mpirun-local.sh" "$cfg"
[[ $rc != 0 ]] || fail "mpirun-local.sh with 1 slot for 2 ranks: exit 0"
grep -q "There are not enough slots available in the system" "$tmp/local_slots.err" ||
  { show local_slots; fail "mpirun's 'not enough slots' message is hidden"; }
echo "ok: too few slots: mpirun's message is shown, exit $rc"

run 30 localgpu env PATH="$tmp/gpus:$PATH" NP=3 DTRAIN_DRY_RUN=1 bash "$src/launch/mpirun-local.sh" "$cfg"
[[ $rc == 0 ]] || { show localgpu; fail "mpirun-local.sh dry run: exit $rc"; }
grep -q -- "-np 2 $bin $cfg" "$tmp/localgpu.err" || { show localgpu; fail "2 GPUs: not one rank per GPU"; }
echo "ok: with 2 GPUs, one rank per GPU"

# ---- hostfile -------------------------------------------------------------------------------
echo "localhost slots=2" >"$tmp/hosts"
run 30 hostsdry env PATH="$nopath" GPUS_PER_NODE=4 DTRAIN_DRY_RUN=1 bash "$src/launch/mpirun-hosts.sh" \
  --hostfile "$tmp/hosts" "$cfg" train.lr=0.01
[[ $rc == 0 ]] || { show hostsdry; fail "mpirun-hosts.sh dry run: exit $rc"; }
grep -q -- "--hostfile $tmp/hosts .*-np 4 -npernode 4 .*$bin $cfg train.lr=0.01" "$tmp/hostsdry.err" ||
  { show hostsdry; fail "mpirun-hosts.sh: not -npernode GPUS_PER_NODE"; }
run 180 hosts env PATH="$nopath" HOSTFILE="$tmp/hosts" bash "$src/launch/mpirun-hosts.sh" "$cfg" \
  run.dir="$tmp/hosts_run" run.name=h "${short[@]}"
[[ $rc == 0 ]] || { show hosts; fail "mpirun-hosts.sh: exit $rc"; }
grep -q "world 2 rank(s)" "$tmp/hosts.out" || { show hosts; fail "mpirun-hosts.sh: not 2 ranks"; }
metrics "$tmp/hosts_run/h"
echo "ok: mpirun-hosts.sh ran 2 ranks from 'localhost slots=2'"

# ---- Slurm ----------------------------------------------------------------------------------
sb=$src/launch/dtrain-slurm.sbatch
grep -qE '^#SBATCH --signal=USR1@[0-9]+$' "$sb" || fail "the sbatch script has no --signal=USR1@<secs>"
grep -qE '^#SBATCH --requeue$' "$sb" || fail "the sbatch script has no --requeue"
# Fake srun: records its arguments, then exits with $FAKE_SRUN_EXIT, or runs the command after its
# options once (without checkpoint.resume=auto when this dtrain has no such key).
cat >"$fake/srun" <<'FAKE'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$FAKE_LOG/srun.args"
[[ -z ${FAKE_SRUN_EXIT:-} ]] || exit "$FAKE_SRUN_EXIT"
while [[ $1 == -* ]]; do shift; done
cmd=("$1"); shift
knows=0; "${cmd[0]}" --help 2>/dev/null | grep -q 'checkpoint.resume' && knows=1
for a in "$@"; do [[ $a == checkpoint.resume=auto && $knows == 0 ]] || cmd+=("$a"); done
exec "${cmd[@]}"
FAKE
printf '#!/bin/sh\nprintf "%%s\\n" "$*" >>"$FAKE_LOG/scontrol.args"\n' >"$fake/scontrol"
chmod +x "$fake/srun" "$fake/scontrol"
slurm() {  # slurm NAME [FAKE_SRUN_EXIT]
  rm -f "$tmp/srun.args" "$tmp/scontrol.args"
  run 180 "$1" env PATH="$nopath" FAKE_LOG="$tmp" FAKE_SRUN_EXIT="${2:-}" SLURM_JOB_ID=4242 \
    SLURM_CPUS_PER_TASK=1 DTRAIN_ROOT="$src" bash "$sb" "$cfg" run.dir="$tmp/slurm" run.name=s "${short[@]}"
}
slurm srun_run
[[ $rc == 0 ]] || { show srun_run; fail "sbatch script with dtrain succeeding: exit $rc"; }
metrics "$tmp/slurm/s"
for a in --kill-on-bad-exit=1 --cpus-per-task=1 "$bin" "$cfg" checkpoint.resume=auto run.name=s train.epochs=1; do
  grep -qxF -- "$a" "$tmp/srun.args" || { cat "$tmp/srun.args" >&2; fail "srun was not given '$a'"; }
done
[[ ! -e $tmp/scontrol.args ]] || fail "exit 0 requeued the job: $(cat "$tmp/scontrol.args")"
echo "ok: sbatch: srun $(tr '\n' ' ' <"$tmp/srun.args" | cut -c1-100)...; exit 0, no requeue"
slurm srun_75 75
[[ $rc == 75 ]] || { show srun_75; fail "dtrain exit 75: the script exited $rc"; }
[[ -e $tmp/scontrol.args && $(cat "$tmp/scontrol.args") == "requeue 4242" ]] ||
  { show srun_75; fail "dtrain exit 75 did not run 'scontrol requeue 4242'"; }
echo "ok: sbatch: exit 75 requeues the job (scontrol $(cat "$tmp/scontrol.args")) and is passed on"
slurm srun_138 138
[[ $rc == 138 ]] || { show srun_138; fail "tasks ended by SIGUSR1: the script exited $rc"; }
[[ -e $tmp/scontrol.args && $(cat "$tmp/scontrol.args") == "requeue 4242" ]] ||
  { show srun_138; fail "tasks ended by SIGUSR1 (exit 138) did not requeue the job"; }
echo "ok: sbatch: tasks ended by SIGUSR1 before dtrain could save (138) requeue the job"
slurm srun_1 1
[[ $rc == 1 ]] || { show srun_1; fail "dtrain exit 1: the script exited $rc"; }
[[ ! -e $tmp/scontrol.args ]] || fail "exit 1 requeued the job"
echo "ok: sbatch: exit 1 is passed on, no requeue"
echo "PASS"
