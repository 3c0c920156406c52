#!/usr/bin/env bash
# Run dtrain on this machine under mpirun, one rank per GPU (or CPU slot):
#
#   launch/mpirun-local.sh NP CONFIG [section.key=value ...]
#   launch/mpirun-local.sh 2 configs/fashion_mnist.yaml train.epochs=1
#
# It adds what plain `mpirun -np NP dtrain ...` needs here: --allow-run-as-root when run as root,
# --oversubscribe when NP is more than the cores. Binary: $DTRAIN_BIN, else build/bin/dtrain,
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
exec mpirun "${flags[@]}" -np "$np" "$bin" "$@"
