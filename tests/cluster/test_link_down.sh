#!/usr/bin/env bash
# cluster tier: node 2's link set down (its veth on the bridge) while 4 ranks on 2 nodes train
# (launch/mpirun-hosts.sh started on node 1). No packet passes and no connection is reset: mpirun
# learns of the loss from TCP keepalive between it and node 2's Open MPI daemon (mpirun-hosts.sh
# shortens Open MPI's 8 minutes to 25 s) and ends every rank on both nodes, within 45 s of the cut,
# exit non-zero, with Open MPI's "lost communication with a remote daemon" naming dtrain-n2;
# afterwards no process (dtrain, orted) is left on any node. The watchdog (run.timeout_s=60 here)
# does not get to fire: when it fires first, mpirun waits for TCP's retransmissions instead
# (mpirun-hosts.sh, docs/RUNNING.md).
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_setup link 2

hosts_start 180 cut "$hostfile" "$cfg" run.dir="$tmp/runs" run.threads=1 run.log_every=5 \
  run.timeout_s=60 train.eval=false train.epochs=100
sleep 1
start=$(date +%s.%N)
since() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
node_link dtrain-n2 down
rc=0
wait "$job" || rc=$?
elapsed=$(since)
[[ $rc != 124 ]] || { show cut; fail "the job still ran 180 s after its start: mpirun waits for node 2's daemon"; }
[[ $rc != 0 ]] || { show cut; fail "the job exited 0 although node 2 was cut off"; }
awk -v e="$elapsed" 'BEGIN { exit !(e < 45) }' || { show cut; fail "the job took ${elapsed} s to end after node 2's link went down"; }
grep -q "ORTE has lost communication with a remote daemon" "$tmp/cut.err" &&
  grep -qE "Remote daemon: .* on node dtrain-n2" "$tmp/cut.err" ||
  { show cut; fail "mpirun does not say that it lost dtrain-n2's daemon"; }
nodes_empty 5
echo "node 2's link down: the job ended with exit $rc after ${elapsed} s:"
grep -h -E "ORTE has lost|Remote daemon:|mpirun-hosts.sh: exit" "$tmp/cut.err" | sed 's/^/  /'
echo "ok: no process left on ${cluster_nodes[*]}"
echo "PASS"
