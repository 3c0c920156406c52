#!/usr/bin/env bash
# cluster tier: a rank on node 2 killed with SIGKILL while 4 ranks on 2 nodes train
# (launch/mpirun-hosts.sh started on node 1) ends every rank on both nodes within 60 s, with a
# non-zero exit and one line naming the killed rank and its host; afterwards no dtrain process
# and no Open MPI daemon is left on any node. The watchdog is set high (run.timeout_s=600): it is
# Open MPI noticing the dead rank, through node 2's daemon and the TCP link to mpirun, that ends
# the job.
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_setup kill 2

hosts_start 180 killed "$hostfile" "$cfg" run.dir="$tmp/runs" run.threads=1 run.log_every=5 \
  run.timeout_s=600 train.eval=false train.epochs=100
victim="" rank=""
for p in $(node_pids dtrain-n2); do
  [[ $(cat "/proc/$p/comm" 2>/dev/null) == dtrain ]] || continue
  r=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  if [[ -z $rank || $r -gt $rank ]]; then victim=$p rank=$r; fi
done
[[ -n $victim ]] || { kill "$job" 2>/dev/null; fail "no dtrain rank found on dtrain-n2"; }
sleep 1
start=$(date +%s.%N)
kill -KILL "$victim"
rc=0
wait "$job" || rc=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
# timeout's 124 (137 is also what a rank killed by SIGKILL makes mpirun return: the time tells).
[[ $rc != 124 ]] || { show killed; fail "the job still ran 180 s after its start: rank $rank's death on dtrain-n2 did not end it"; }
[[ $rc != 0 ]] || { show killed; fail "the job exited 0 although rank $rank was killed"; }
awk -v e="$elapsed" 'BEGIN { exit !(e < 60) }' || { show killed; fail "the job took ${elapsed} s to end after rank $rank was killed"; }
# One line names the rank and its host.
line=$(grep -h -E "rank $rank .*dtrain-n2|dtrain-n2.*rank $rank" "$tmp/killed.out" "$tmp/killed.err" | head -1)
[[ -n $line ]] || { show killed; fail "no line names rank $rank and its host dtrain-n2"; }
nodes_empty 5
echo "killed rank $rank (pid $victim) on dtrain-n2; the job ended with exit $rc after ${elapsed} s:"
echo "  $line"
grep -h "exit $rc" "$tmp/killed.err" | tail -1 | sed 's/^/  /'
echo "ok: no process left on ${cluster_nodes[*]}"
echo "PASS"
