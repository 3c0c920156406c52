#!/usr/bin/env bash
# cluster tier: Open MPI across two nodes (network + UTS namespaces, cluster.sh), 2 ranks each,
# through launch/mpirun-hosts.sh with a hostfile of the two, started on the first node:
#   - `dtrain env` says 4 ranks on 2 hosts and puts ranks 0-1 on dtrain-n1, 2-3 on dtrain-n2
#     (local ranks 0/2 and 1/2 on each);
#   - Fashion-MNIST trains 30 steps on the 4 ranks: the start-up names world 4 and rank 0's host,
#     the report names both hosts; the final parameters and optimizer state equal, bit for bit,
#     those of the same 4 ranks on one node (the network between hosts changes no sum), and one
#     rank's at the same global batch (128) within 1e-5 relative, tensor by tensor (the dist
#     tier's equivalence bound).
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_setup mpirun 2

# ---- where the ranks are -------------------------------------------------------------------------
hosts_run 60 env "$hostfile" env
[[ $rc == 0 ]] || { show env; fail "dtrain env on 2 nodes: exit $rc"; }
has env "Launcher: mpirun, 4 rank(s) on 2 host(s)"
table=$(sed -n '/^Launcher: mpirun/,/^  threads:/p' "$tmp/env.out")
for want in "0 0/2 dtrain-n1" "1 1/2 dtrain-n1" "2 0/2 dtrain-n2" "3 1/2 dtrain-n2"; do
  awk '{ print $1, $2, $3 }' <<<"$table" | grep -qx -- "$want" || { echo "$table" >&2; fail "dtrain env: no rank row '$want'"; }
done
echo "ok: dtrain env through mpirun-hosts.sh: $(grep '^Launcher:' "$tmp/env.out")"
sed -n '/^  rank  local/,/^  3 /p' "$tmp/env.out"

# ---- 4 ranks on 2 nodes against 4 ranks on one host and against 1 rank -----------------------------
# The tier's recipe (cluster_setup): 1 rank and 4 differ only by fp32 rounding.
common=("${recipe[@]}" run.log_every=10 train.max_steps=30 checkpoint.every_steps=10
        train.global_batch=128)
start=$(date +%s)
hosts_run 120 four "$hostfile" "$cfg" "${common[@]}" run.name=four
[[ $rc == 0 ]] || { show four; fail "4 ranks on 2 nodes: exit $rc"; }
echo "4 ranks on 2 nodes: $(( $(date +%s) - start )) s"
has four "--hostfile $hostfile" "world 4 rank(s) on 2 hosts: dtrain-n1 (ranks 0-1), dtrain-n2 (ranks 2-3)" \
  "global batch 128 = 4 rank(s) x 32 per rank" "training: 4 rank(s)"
grep -h -F -e "+ mpirun" -e "world 4 rank(s)" -e "training: 4 rank(s)" "$tmp/four.out" "$tmp/four.err"
# Every rank's host, gathered by the report (report.html's "world" fact).
grep -qF '4 rank(s) on dtrain-n1, dtrain-n2' "$tmp/runs/four/report.html" ||
  fail "report.html does not name both hosts ('4 rank(s) on dtrain-n1, dtrain-n2')"
echo "ok: report.html: world $(grep -oE '4 rank\(s\) on dtrain-n1, dtrain-n2' "$tmp/runs/four/report.html")"

# The same 4 ranks on node 1 alone (shared memory between them, no network): bit for bit.
run 120 local "$cluster_here/on-node.sh" dtrain-n1 "$mpiexec" "${mpi_flags[@]}" -np 4 "$bin" "$cfg" \
  "${common[@]}" run.name=local
[[ $rc == 0 ]] || { show local; fail "4 ranks on node 1: exit $rc"; }
end_four=$(checkpoint four 30)
end_local=$(checkpoint local 30)
same_model "$end_four" "$end_local"
echo "ok: 4 ranks on 2 nodes end bit for bit as 4 ranks on one node"

# One rank alone on node 1, no launcher: the same global batch.
run 120 one "$cluster_here/on-node.sh" dtrain-n1 "$bin" "$cfg" "${common[@]}" run.name=one
[[ $rc == 0 ]] || { show one; fail "1 rank: exit $rc"; }
has one "world 1 rank(s) on 1 host: dtrain-n1 (rank 0)" "global batch 128 = 1 rank(s) x 128 per rank"
mid_one=$(checkpoint one 10)
end_one=$(checkpoint one 30)
moved "$mid_one" "$end_one"
close_model "$end_four" "$end_one"
echo "ok: 4 ranks on 2 nodes end with 1 rank's parameters (global batch 128, 30 steps)"
echo "PASS"
