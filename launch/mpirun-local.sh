#!/usr/bin/env bash
# Run dtrain on this machine under mpirun: one rank per GPU when there are GPUs, else NP CPU ranks.
#
#   launch/mpirun-local.sh CONFIG [section.key=value ...]
#   NP=4 launch/mpirun-local.sh configs/fashion_mnist.yaml train.epochs=1
#   launch/mpirun-local.sh NP CONFIG [section.key=value ...]      (the older form: NP first)
#
# Ranks: the GPUs `nvidia-smi -L` lists (one rank each), else $NP, else 2 CPU ranks (1 on a
# one-core machine). Each rank is bound to its own share of this process's CPUs (mpirun
# --map-by slot:PE=<cpus/ranks> --bind-to hwthread), so dtrain's default run.threads gives each
# rank exactly those CPUs; with more ranks than CPUs it adds --oversubscribe and binds nothing.
# Env: NP (CPU ranks), DTRAIN_BIN (else build/bin/dtrain, else build-gpu/bin/dtrain),
# DTRAIN_BIND=none (no binding), DTRAIN_MPIRUN_ARGS (extra mpirun options, split on spaces),
# DTRAIN_DRY_RUN=1 (print the mpirun command, run nothing). Adds --allow-run-as-root as root.
# Ctrl-C (or SIGTERM) reaches every rank, which saves a checkpoint and exits 75; a second ends the
# ranks at once, the exit still theirs (75 once stopped). Open MPI's blocks that repeat a rank's
# non-zero exit are left out: dtrain's line says why, then "mpirun-local.sh: exit N".
set -euo pipefail

usage() {
  sed -n '2,18s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}
np=${NP:-}
if [[ $# -ge 2 && $1 =~ ^[0-9]+$ ]]; then np=$1; shift; fi
[[ $# -ge 1 && $1 != -* ]] || usage
[[ -z $np || $np =~ ^[1-9][0-9]*$ ]] || { echo "mpirun-local.sh: NP must be a positive integer, got '$np'" >&2; usage; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${DTRAIN_BIN:-}
if [[ -z $bin ]]; then
  for b in "$root/build/bin/dtrain" "$root/build-gpu/bin/dtrain"; do
    if [[ -x $b ]]; then bin=$b; break; fi
  done
fi
[[ -n $bin && -x $bin ]] || {
  echo "mpirun-local.sh: no dtrain binary (looked for \$DTRAIN_BIN, build/bin/dtrain, build-gpu/bin/dtrain); build it with: bash launch/setup.sh demo" >&2
  exit 1
}
command -v mpirun >/dev/null || { echo "mpirun-local.sh: mpirun not found (Debian: apt-get install openmpi-bin)" >&2; exit 1; }

gpus=0
if command -v nvidia-smi >/dev/null; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
cpus=$(nproc)
if ((gpus > 0)); then
  [[ -z ${NP:-} ]] || echo "mpirun-local.sh: $gpus GPU(s): one rank per GPU (NP=$NP ignored)" >&2
  np=$gpus
elif [[ -z $np ]]; then
  np=$((cpus >= 2 ? 2 : 1))
fi

flags=()
if [[ $(id -u) == 0 ]]; then flags+=(--allow-run-as-root); fi
if ((np > cpus)); then
  flags+=(--oversubscribe --bind-to none)
elif [[ ${DTRAIN_BIND:-} == none ]]; then
  flags+=(--bind-to none)
else
  flags+=(--use-hwthread-cpus --map-by "slot:PE=$((cpus / np))" --bind-to hwthread)
fi
read -r -a extra <<<"${DTRAIN_MPIRUN_ARGS:-}"
flags+=("${extra[@]}")

# NVLink multicast (NVLS) stays off on multi-GPU hosts unless the caller says otherwise.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

echo "+ mpirun ${flags[*]} -np $np $bin $*" >&2
[[ ${DTRAIN_DRY_RUN:-0} == 1 ]] && exit 0
# Open MPI's blocks after a rank's non-zero exit are left out (dtrain's line says why, and the
# last line the exit code); Ctrl-C and SIGTERM become SIGUSR1 (launch/mpirun-output.sh).
source "$root/launch/mpirun-output.sh"
run_mpirun mpirun-local.sh "${flags[@]}" -np "$np" "$bin" "$@"
