#!/usr/bin/env bash
# Open MPI's launch agent for the cluster tier's nodes (plm_rsh_agent, see cluster.sh): mpirun
# calls it as it would call ssh, `rsh-agent.sh [options] HOST COMMAND...`, to start its daemon
# (orted) on HOST. It runs COMMAND on that node (its network and UTS namespaces) through a shell,
# with the bare environment of a login there (HOME, PATH, USER), as sshd would: what the ranks
# need from mpirun's environment must come with mpirun -x.
set -euo pipefail
while [[ ${1:-} == -* ]]; do shift; done   # ssh options (plm_rsh_args); none are set
[[ $# -ge 2 ]] || { echo "rsh-agent.sh: usage: rsh-agent.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift
fail() { echo "rsh-agent.sh: $*" >&2; exit 255; }
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
on_node "$host" env -i HOME="${HOME:-/root}" USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/bash \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$*"
