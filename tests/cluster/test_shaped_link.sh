#!/usr/bin/env bash
# cluster tier: the link between the two nodes shaped with the kernel's token bucket (tc qdisc
# tbf, cluster.sh's node_shape: on both ends of each node's veth, so each node sends and receives
# at most the rate) while 4 ranks on the 2 nodes train (launch/mpirun-hosts.sh, 2 ranks a node):
#   - at 1 Gbit/s the job trains to the same model and optimizer state, bit for bit, as unshaped
#     (the link's speed changes when bytes arrive, never the sums);
#   - the gradients went through the shaped link: each tbf counted at least the gradient's bytes
#     for every step (an all-reduce across two hosts moves at least that much each way);
#   - the step times and the share of communication left exposed are printed (no bound is set
#     on them: bench/cluster_link.sh measures them, docs/RUNNING.md has its numbers);
#   - `node_shape HOST off` removes the qdiscs, and the teardown removes a shaped link's with the
#     nodes: no qdisc and no link of the prefix is left.
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_setup shaped 2

rate=1gbit
steps=30
common=("${recipe[@]}" run.log_every=10 train.max_steps=$steps train.global_batch=128)

# summary RUN: rank 0's step time and exposed communication, from the run's summary record.
summary() {
  "$py" - "$tmp/runs/$1/metrics.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
t = s["data_s"] + s["compute_s"] + s["comm_s"] + s["optimizer_s"]
rate = s.get("steady_samples_per_s", s["samples_per_s"])
print(f"{rate:.0f} samples/s steady, {1000 * 128 / rate:.1f} ms a step; communication exposed {100 * s['comm_s'] / t:.1f}% of rank 0's step time")
PY
}
# sent_bytes LINE: the bytes a tbf line of node_qdiscs counted.
sent_bytes() { sed -nE 's/.*Sent ([0-9]+) bytes.*/\1/p' <<<"$1"; }

hosts_run 120 plain "$hostfile" "$cfg" "${common[@]}" run.name=plain
[[ $rc == 0 ]] || { show plain; fail "unshaped: exit $rc"; }
[[ -z $(node_qdiscs dtrain-n1)$(node_qdiscs dtrain-n2) ]] || fail "a tbf qdisc on a link before shaping"
echo "unshaped: $(summary plain)"

for h in "${cluster_nodes[@]}"; do node_shape "$h" "$rate"; done
for h in "${cluster_nodes[@]}"; do
  n=$(node_qdiscs "$h" | grep -c "qdisc tbf .* rate 1Gbit" || true)
  [[ $n == 2 ]] || { node_qdiscs "$h" >&2; fail "$h: $n tbf qdisc(s) of 1Gbit on its link, expected 2 (both ends)"; }
done
hosts_run 120 shaped "$hostfile" "$cfg" "${common[@]}" run.name=shaped
[[ $rc == 0 ]] || { show shaped; fail "shaped to $rate: exit $rc"; }
echo "shaped to $rate: $(summary shaped)"
grad=$("$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"summary\"" in l][-1]["gradient_bytes"])' \
  "$tmp/runs/shaped/metrics.jsonl")
for h in "${cluster_nodes[@]}"; do
  while read -r line; do
    sent=$(sent_bytes "$line")
    ((sent >= steps * grad)) || { node_qdiscs "$h" >&2; fail "$h: a tbf passed $sent bytes, less than $steps steps x $grad gradient bytes"; }
    echo "  ${line%%:*}: $sent bytes through the tbf ($steps steps x $grad gradient bytes = $((steps * grad)))"
  done < <(node_qdiscs "$h" | grep "Sent ")
done
same_model "$(checkpoint shaped $steps)" "$(checkpoint plain $steps)"
echo "ok: shaped to $rate, 4 ranks on 2 nodes end bit for bit as unshaped"

for h in "${cluster_nodes[@]}"; do node_shape "$h" off; done
[[ -z $(node_qdiscs dtrain-n1)$(node_qdiscs dtrain-n2) ]] || fail "node_shape off left a tbf qdisc"
# Shaped again, then torn down as the EXIT trap does: nothing of the prefix is left.
node_shape dtrain-n2 "$rate"
cluster_down
left=$(tc qdisc show 2>/dev/null | grep "dev ${cluster_prefix}-" || true)
[[ -z $left ]] || fail "qdiscs left after the teardown: $left"
left=$(ip -o link show 2>/dev/null | grep ": ${cluster_prefix}-" || true)
[[ -z $left ]] || fail "links left after the teardown: $left"
echo "ok: node_shape off removed the qdiscs; the teardown removed a shaped link's with the nodes"
echo "PASS"
