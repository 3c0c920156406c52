#!/usr/bin/env bash
# cluster tier: Open MPI across three nodes, one rank each, through launch/mpirun-hosts.sh with a
# hostfile of the three (`dtrain-nK slots=1`), started on the first node:
#   - `dtrain env` says 3 ranks on 3 hosts, rank K-1 on dtrain-nK (local rank 0/1 on each);
#   - Fashion-MNIST trains 30 steps at global batch 96 (3 x 32): the report names the three hosts;
#     the final model and optimizer state equal, bit for bit, those of 3 ranks on one node, and
#     one rank's at the same global batch within 1e-5 relative, tensor by tensor (the equivalence
#     bound of test_mpirun_hosts.sh and the dist tier). An odd world: no pairing of ranks or hosts
#     hides a wrong sum.
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_setup three 3
for h in "${cluster_nodes[@]}"; do echo "$h slots=1"; done >"$hostfile"

# ---- where the ranks are -------------------------------------------------------------------------
hosts_run 60 env "$hostfile" env
[[ $rc == 0 ]] || { show env; fail "dtrain env on 3 nodes: exit $rc"; }
has env "Launcher: mpirun, 3 rank(s) on 3 host(s)"
table=$(sed -n '/^Launcher: mpirun/,/^  threads:/p' "$tmp/env.out")
for want in "0 0/1 dtrain-n1" "1 0/1 dtrain-n2" "2 0/1 dtrain-n3"; do
  awk '{ print $1, $2, $3 }' <<<"$table" | grep -qx -- "$want" || { echo "$table" >&2; fail "dtrain env: no rank row '$want'"; }
done
echo "ok: dtrain env through mpirun-hosts.sh: $(grep '^Launcher:' "$tmp/env.out")"
sed -n '/^  rank  local/,/^  2 /p' "$tmp/env.out"

# ---- 3 ranks on 3 nodes against 3 ranks on one node and against 1 rank ----------------------------
common=("${recipe[@]}" run.log_every=10 train.max_steps=30 checkpoint.every_steps=10
        train.global_batch=96)
start=$(date +%s)
hosts_run 120 three "$hostfile" "$cfg" "${common[@]}" run.name=three
[[ $rc == 0 ]] || { show three; fail "3 ranks on 3 nodes: exit $rc"; }
echo "3 ranks on 3 nodes: $(($(date +%s) - start)) s"
has three "world 3 rank(s) on 3 hosts: dtrain-n1 (rank 0), dtrain-n2 (rank 1), dtrain-n3 (rank 2)" "global batch 96 = 3 rank(s) x 32 per rank"
grep -h -F -e "world 3 rank(s)" -e "training: 3 rank(s)" "$tmp/three.out" "$tmp/three.err"
grep -qF '3 rank(s) on dtrain-n1, dtrain-n2, dtrain-n3' "$tmp/runs/three/report.html" ||
  fail "report.html does not name the three hosts ('3 rank(s) on dtrain-n1, dtrain-n2, dtrain-n3')"
echo "ok: report.html: world 3 rank(s) on dtrain-n1, dtrain-n2, dtrain-n3"

run 120 local "$cluster_here/on-node.sh" dtrain-n1 "$mpiexec" "${mpi_flags[@]}" -np 3 "$bin" "$cfg" \
  "${common[@]}" run.name=local
[[ $rc == 0 ]] || { show local; fail "3 ranks on node 1: exit $rc"; }
end_three=$(checkpoint three 30)
same_model "$end_three" "$(checkpoint local 30)"
echo "ok: 3 ranks on 3 nodes end bit for bit as 3 ranks on one node"

run 120 one "$cluster_here/on-node.sh" dtrain-n3 "$bin" "$cfg" "${common[@]}" run.name=one
[[ $rc == 0 ]] || { show one; fail "1 rank: exit $rc"; }
has one "world 1 rank(s) on 1 host: dtrain-n3 (rank 0)" "global batch 96 = 1 rank(s) x 96 per rank"
end_one=$(checkpoint one 30)
moved "$(checkpoint one 10)" "$end_one"
close_model "$end_three" "$end_one"
echo "ok: 3 ranks on 3 nodes end with 1 rank's parameters (global batch 96, 30 steps)"
echo "PASS"
