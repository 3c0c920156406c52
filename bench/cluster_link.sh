#!/usr/bin/env bash
# The same 2-node job over a link of a few speeds: the cluster tier's two hosts made of Linux
# namespaces (tests/cluster/cluster.sh), each node's link shaped with tc's token bucket (tbf, both
# directions: cluster.sh's node_shape) to each RATE in turn, "unshaped" for none. For each: the
# TCP throughput one node gets to the other (a 1-stream probe, python3), then 4 ranks (2 a node;
# PER_NODE=1: one a node) train STEPS steps through launch/mpirun-hosts.sh started on node 1.
# The table gives rank 0's steady step time, the share of its step spent waiting for
# communication after backward (what overlap left exposed: the summary's comm_s over data +
# compute + comm + optimizer), and each of the diagnosis's findings up to its first ';'
# (report.txt, printed whole above the table). Another load on the machine changes the numbers:
# the load average is printed with each rate.
#   sudo bash bench/cluster_link.sh                           # unshaped 10gbit 1gbit 100mbit
#   sudo bash bench/cluster_link.sh unshaped 1gbit            # chosen rates
#   sudo EXTRA="model.name=mlp model.hidden=1024,1024" bash bench/cluster_link.sh   # more bytes
# Needs root, iproute2 (ip, tc), Open MPI and build/bin/dtrain; about 20 s per rate on 2 cores.
# Environment: DTRAIN_BIN, STEPS (default 100), PER_NODE (ranks a node, default 2: on 2 cores
# the 4 ranks share them, and the slowest rank's lag shows as waiting too), EXTRA (overrides for
# every run), OUT (default a temp folder, removed at the end; set: kept, with each run's log and
# run directory).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/e2e/common.sh
source tests/cluster/cluster.sh
why=$(cluster_missing)
[[ -z $why ]] || fail "bench/cluster_link.sh $why"
[[ -x $bin ]] || fail "no $bin: build first, or set DTRAIN_BIN"
command -v tc >/dev/null || fail "needs tc (iproute2)"
rates=("$@")
((${#rates[@]})) || rates=(unshaped 10gbit 1gbit 100mbit)
steps=${STEPS:-100}
per_node=${PER_NODE:-2}
read -ra extra <<<"${EXTRA:-}"
keep=${OUT:-}
out=${OUT:-$(mktemp -d /tmp/dtrain-cluster-link.XXXXXX)}
mkdir -p "$out"
trap 'cluster_down; [[ -n $keep ]] || rm -rf "$out"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
export DTRAIN_BIN=$bin OMPI_MCA_mpi_yield_when_idle=1 DTRAIN_MPIRUN_ARGS
cluster_up 2
DTRAIN_MPIRUN_ARGS=$(cluster_mpi_args)
printf 'dtrain-n1 slots=%s\ndtrain-n2 slots=%s\n' "$per_node" "$per_node" >"$out/hosts"

# probe: Gbit/s of one TCP stream from node 1 to node 2 (400 MiB, or 5 s).
probe() {
  tests/cluster/on-node.sh dtrain-n2 python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5001)); s.listen(1); c, _ = s.accept(); n = 0; t = time.time()
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print("%.2f" % (n * 8 / (time.time() - t) / 1e9))' >"$out/probe" &
  local server=$!
  sleep 0.5
  tests/cluster/on-node.sh dtrain-n1 python3 -c '
import socket, time
s = socket.create_connection(("dtrain-n2", 5001)); b = b"x" * (1 << 20); t = time.time()
for _ in range(400):
    s.sendall(b)
    if time.time() - t > 5: break
s.close()'
  wait "$server"
  cat "$out/probe"
}

# row RUN: the summary numbers of a run as "ms share samples/s wire_MiB".
row() {
  python3 - "$out/runs/$1/metrics.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
t = s["data_s"] + s["compute_s"] + s["comm_s"] + s["optimizer_s"]
rate = s.get("steady_samples_per_s", s["samples_per_s"])
print(f"{1000 * 128 / rate:.1f} {100 * s['comm_s'] / t:.1f} {rate:.0f} {s['wire_bytes_per_step']['all_reduce'] / 2**20:.2f}")
PY
}

cfg=configs/fashion_mnist.yaml
table=$out/table.md
{
  echo "| link | TCP, 1 stream | step (rank 0, steady) | samples/s | exposed communication | diagnosis |"
  echo "| --- | --- | --- | --- | --- | --- |"
} >"$table"
for r in "${rates[@]}"; do
  for h in dtrain-n1 dtrain-n2; do node_shape "$h" "$([[ $r == unshaped ]] && echo off || echo "$r")"; done
  gbit=$(probe)
  echo "== $r: one TCP stream n1 -> n2: $gbit Gbit/s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  rc=0
  timeout -k 10 600 tests/cluster/on-node.sh dtrain-n1 bash launch/mpirun-hosts.sh --hostfile "$out/hosts" \
    "$cfg" run.dir="$out/runs" run.name="$r" run.threads=1 run.log_every=20 run.timeout_s=60 \
    train.eval=false train.max_steps="$steps" checkpoint.every_epoch=false train.global_batch=128 \
    train.optimizer=sgd train.momentum=0.9 train.lr=0.01 "${extra[@]}" >"$out/$r.log" 2>&1 || rc=$?
  [[ $rc == 0 ]] || { tail -n 30 "$out/$r.log" >&2; fail "$r: the job exited $rc"; }
  read -r ms share sps mib < <(row "$r")
  findings=$(sed -n '/^diagnosis:/,$p' "$out/runs/$r/report.txt" | grep -E '^  [a-z]' | sed -E 's/^  //; s/;.*//' | paste -sd'|' | sed 's/|/ \/ /g')
  sed -n '/^done:/,$p' "$out/runs/$r/report.txt"
  echo "| $r | $gbit Gbit/s | $ms ms | $sps | $share% | $findings |" >>"$table"
done
echo
echo "$((2 * per_node)) ranks on 2 nodes ($per_node a node), $cfg ${extra[*]}, $steps steps of 128; all-reduce $mib MiB a step (wire_bytes_per_step):"
cat "$table"
