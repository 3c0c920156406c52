#!/usr/bin/env bash
# Run dtrain on this machine under mpirun, one rank per GPU (or CPU slot):
#
#   launch/mpirun-local.sh NP CONFIG [section.key=value ...]
#   launch/mpirun-local.sh 2 configs/fashion_mnist.yaml train.epochs=1
#
# It adds what plain `mpirun -np NP dtrain ...` needs here: --allow-run-as-root when run as root,
# --oversubscribe when NP is more than the cores; and Ctrl-C (or SIGTERM) reaches every rank,
# which saves a checkpoint and exits 75 (a second Ctrl-C ends the job at once). Binary: $DTRAIN_BIN, else build/bin/dtrain,
# else build-gpu/bin/dtrain. Extra mpirun options: $DTRAIN_MPIRUN_ARGS (split on spaces).
set -euo pipefail

usage() {
  sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
np=$1
shift
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "mpirun-local.sh: NP must be a positive integer, got '$np'" >&2; usage; }

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

flags=()
if [[ $(id -u) == 0 ]]; then flags+=(--allow-run-as-root); fi
if ((np > $(nproc))); then flags+=(--oversubscribe); fi
read -r -a extra <<<"${DTRAIN_MPIRUN_ARGS:-}"
flags+=("${extra[@]}")

# NVLink multicast (NVLS) stays off on multi-GPU hosts unless the caller says otherwise.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

echo "+ mpirun ${flags[*]} -np $np $bin $*" >&2
# Ctrl-C and SIGTERM: mpirun would end the ranks at once (Open MPI cannot forward SIGINT or
# SIGTERM), so mpirun runs in its own session and this script turns the first Ctrl-C or SIGTERM
# into SIGUSR1, which mpirun forwards to every rank: dtrain saves a checkpoint at the next step
# boundary and exits 75. A second Ctrl-C ends the job at once.
setsid mpirun "${flags[@]}" -np "$np" "$bin" "$@" &
job=$!
stops=0
stop() {
  stops=$((stops + 1))
  if ((stops == 1)); then
    echo "mpirun-local.sh: stopping: every rank saves a checkpoint at the next step (Ctrl-C again to end at once)" >&2
    kill -USR1 "$job" 2>/dev/null || true
  else
    kill -INT "$job" 2>/dev/null || true
  fi
}
trap stop INT TERM
rc=0
while kill -0 "$job" 2>/dev/null; do
  wait "$job" && rc=0 || rc=$?
done
exit "$rc"
