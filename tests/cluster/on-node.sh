#!/usr/bin/env bash
# on-node.sh HOST COMMAND...: run COMMAND on a node of the cluster tier (cluster.sh's on_node), in
# its network and UTS namespaces with its /etc/hosts, keeping this environment; HOST is the node's
# name (dtrain-n1) or address. For commands that take a program, not a shell function (timeout).
set -euo pipefail
fail() { echo "on-node.sh: $*" >&2; exit 255; }
[[ $# -ge 2 ]] || fail "usage: on-node.sh HOST COMMAND..."
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
on_node "$@"
