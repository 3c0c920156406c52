#!/usr/bin/env bash
# Run dtrain on several machines under mpirun with a hostfile: one rank per GPU of each node.
#
#   launch/mpirun-hosts.sh [--hostfile FILE] CONFIG [section.key=value ...]
#   HOSTFILE=hosts.txt launch/mpirun-hosts.sh configs/x.yaml train.lr=3e-4
#
# The hostfile is Open MPI's: one line per node, `node01 slots=8`. Ranks per node: $GPUS_PER_NODE,
# else the GPUs `nvidia-smi -L` lists here (the nodes are taken to be alike), one rank per GPU
# (mpirun -npernode); with no GPUs, the hostfile's slots (one CPU rank per slot). The binary must
# be at the same path on every node (a shared file system). The NCCL_*, OMP_*, PATH and
# LD_LIBRARY_PATH settings are forwarded (-x). A host lost from the network ends the job within
# 25 s (Open MPI's TCP keepalive, OMPI_MCA_oob_tcp_keepalive_*, shortened from 8 minutes).
# Env: HOSTFILE, GPUS_PER_NODE, DTRAIN_BIN (else build/bin/dtrain, else build-gpu/bin/dtrain),
# DTRAIN_MPIRUN_ARGS (extra mpirun options, split on spaces), DTRAIN_DRY_RUN=1 (print the mpirun
# command, run nothing). Adds --allow-run-as-root as root.
# As launch/mpirun-local.sh: Ctrl-C (or SIGTERM) makes every rank save a checkpoint and exit 75
# (a second Ctrl-C ends the job at once), and Open MPI's blocks that repeat a rank's non-zero exit
# are left out: dtrain's line says why, then "mpirun-hosts.sh: exit N".
set -euo pipefail

usage() {
  sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}
hostfile=${HOSTFILE:-}
if [[ ${1:-} == --hostfile || ${1:-} == -H ]]; then
  [[ $# -ge 2 ]] || usage
  hostfile=$2
  shift 2
fi
[[ $# -ge 1 && $1 != -* ]] || usage
[[ -n $hostfile ]] || { echo "mpirun-hosts.sh: no hostfile (give --hostfile FILE or set HOSTFILE)" >&2; usage; }
[[ -r $hostfile ]] || { echo "mpirun-hosts.sh: cannot read the hostfile '$hostfile'" >&2; exit 1; }
hostfile=$(cd "$(dirname "$hostfile")" && pwd)/$(basename "$hostfile")

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${DTRAIN_BIN:-}
if [[ -z $bin ]]; then
  for b in "$root/build-gpu/bin/dtrain" "$root/build/bin/dtrain"; do
    if [[ -x $b ]]; then bin=$b; break; fi
  done
fi
[[ -n $bin && -x $bin ]] || {
  echo "mpirun-hosts.sh: no dtrain binary (looked for \$DTRAIN_BIN, build-gpu/bin/dtrain, build/bin/dtrain)" >&2
  exit 1
}
command -v mpirun >/dev/null || { echo "mpirun-hosts.sh: mpirun not found (Debian: apt-get install openmpi-bin)" >&2; exit 1; }

# Nodes and slots from the hostfile (comments and blank lines skipped; no slots= means 1).
nodes=0
slots=0
while read -r host rest; do
  [[ -z $host || $host == \#* ]] && continue
  nodes=$((nodes + 1))
  s=1
  if [[ $rest =~ slots=([0-9]+) ]]; then s=${BASH_REMATCH[1]}; fi
  slots=$((slots + s))
done <"$hostfile"
((nodes > 0)) || { echo "mpirun-hosts.sh: the hostfile '$hostfile' names no node" >&2; exit 1; }

per_node=${GPUS_PER_NODE:-}
if [[ -z $per_node ]] && command -v nvidia-smi >/dev/null; then
  per_node=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
flags=(--hostfile "$hostfile")
if [[ $(id -u) == 0 ]]; then flags+=(--allow-run-as-root); fi
if [[ -n $per_node && $per_node != 0 ]]; then
  [[ $per_node =~ ^[1-9][0-9]*$ ]] || { echo "mpirun-hosts.sh: GPUS_PER_NODE must be a positive integer, got '$per_node'" >&2; exit 2; }
  np=$((nodes * per_node))
  flags+=(-np "$np" -npernode "$per_node" --bind-to none)
else
  np=$slots
  flags+=(-np "$np" --map-by slot --bind-to core)
fi
# A host that drops off the network (a cable, a switch, a frozen kernel) resets no connection:
# mpirun learns that it lost the Open MPI daemon there only from TCP keepalive, by default after
# 300 s without traffic and 9 unanswered probes 20 s apart (8 minutes). Keepalive probes only an
# idle connection: once dtrain's watchdog (run.timeout_s) has ended the ranks, their daemons' reports
# wait unacknowledged and mpirun waits for TCP's retransmissions to give up (about 15 minutes). Here:
# probes after 10 s idle, 3 of them 5 s apart, so mpirun ends such a job within 25 s of the loss,
# before a watchdog of 25 s or more fires. The OMPI_MCA_ variables win when set; mpirun passes them
# to its daemons.
export OMPI_MCA_oob_tcp_keepalive_time=${OMPI_MCA_oob_tcp_keepalive_time:-10}
export OMPI_MCA_oob_tcp_keepalive_intvl=${OMPI_MCA_oob_tcp_keepalive_intvl:-5}
export OMPI_MCA_oob_tcp_keepalive_probes=${OMPI_MCA_oob_tcp_keepalive_probes:-3}
# Settings that must reach the ranks on the other nodes.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
for v in $(compgen -e | grep -E '^(NCCL_|OMP_|LD_LIBRARY_PATH$|PATH$)' || true); do flags+=(-x "$v"); done
read -r -a extra <<<"${DTRAIN_MPIRUN_ARGS:-}"
flags+=("${extra[@]}")

echo "+ mpirun ${flags[*]} $bin $*" >&2
[[ ${DTRAIN_DRY_RUN:-0} == 1 ]] && exit 0
source "$(dirname "${BASH_SOURCE[0]}")/mpirun-output.sh"
run_mpirun mpirun-hosts.sh "${flags[@]}" "$bin" "$@"
