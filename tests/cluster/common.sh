# Shared by the cluster tier's test scripts (sourced, not run): the e2e helpers (common.sh there:
# $bin, $src, fail, run, show, has, same_model), the nodes (cluster.sh), a temp dir on the shared
# file system, the trap that tears everything down whatever happens, the tier's training recipe,
# and jobs started on a node through launch/mpirun-hosts.sh.
# Usage: source "$(dirname "${BASH_SOURCE[0]}")/common.sh"; cluster_setup NAME NODES
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON;
# CI (set: a machine that cannot build nodes fails instead of skipping).

source "$(dirname "${BASH_SOURCE[0]}")/../e2e/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

# cluster_setup NAME N: $tmp, N nodes, $hostfile naming them (2 slots each: 2 CPU ranks per node),
# DTRAIN_MPIRUN_ARGS for launch/mpirun-hosts.sh; all of it removed on exit (also after a failure,
# or SIGTERM/SIGINT from ctest's timeout). $cfg is the tier's config (Fashion-MNIST) and $recipe
# the overrides its comparisons train with: SGD with momentum at a small rate, so that 1 rank and
# N differ only by fp32 rounding (the order of the gradient sums), below 1e-6 over 30 steps
# (AdamW's first steps, about lr * sign(g), turn rounding of near-zero gradients into whole steps:
# 3e-4 after 30 steps, on one host too); a script adds its steps, logging and global batch.
cluster_setup() {
  cluster_require
  e2e_setup "cluster-$1"
  e2e_torch_python
  trap 'cluster_down; rm -rf "$tmp"' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  cluster_up "$2"
  hostfile=$tmp/hosts
  for h in "${cluster_nodes[@]}"; do echo "$h slots=2"; done >"$hostfile"
  export DTRAIN_MPIRUN_ARGS
  DTRAIN_MPIRUN_ARGS=$(cluster_mpi_args)
  export DTRAIN_BIN=$bin
  # Four ranks of two "nodes" share this machine's cores: a rank that waits in MPI yields.
  export OMPI_MCA_mpi_yield_when_idle=1
  cfg=$src/configs/fashion_mnist.yaml
  recipe=(run.dir="$tmp/runs" run.threads=1 run.timeout_s=60 train.eval=false
          train.optimizer=sgd train.momentum=0.9 train.lr=0.01)
}

# hosts_run LIMIT NAME HOSTFILE CONFIG OVERRIDES...: launch/mpirun-hosts.sh started on the
# hostfile's first node, as a user logged in there would; output in $tmp/NAME.{out,err}, $rc.
hosts_run() {
  local limit=$1 name=$2 hf=$3 first
  shift 3
  first=$(awk 'NF && $1 !~ /^#/ { print $1; exit }' "$hf")
  run "$limit" "$name" "$cluster_here/on-node.sh" "$first" bash "$src/launch/mpirun-hosts.sh" --hostfile "$hf" "$@"
}

# hosts_start LIMIT NAME HOSTFILE CONFIG OVERRIDES...: as hosts_run, in the background: $job is
# its process, returned once run NAME (run.name=NAME under $tmp/runs) trains.
hosts_start() {
  local limit=$1 name=$2 hf=$3 first
  shift 3
  first=$(awk 'NF && $1 !~ /^#/ { print $1; exit }' "$hf")
  timeout -k 10 "$limit" "$cluster_here/on-node.sh" "$first" bash "$src/launch/mpirun-hosts.sh" \
    --hostfile "$hf" "$@" run.name="$name" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  job=$!
  wait_job_training "$job" "$name"
}

# wait_job_training PID NAME: until run NAME (under $tmp/runs) has a training record, while the
# background job PID (its output in $tmp/NAME.{out,err}) still runs; fails showing that output.
wait_job_training() {
  local i
  for i in $(seq 1 600); do
    [[ -s $tmp/runs/$2/metrics.jsonl ]] && return 0
    kill -0 "$1" 2>/dev/null || { show "$2"; fail "$2: the job ended before training (exit $(wait "$1"; echo $?))"; }
    sleep 0.1
  done
  show "$2"
  fail "$2: no training record in $tmp/runs/$2/metrics.jsonl after 60 s"
}

# nodes_empty SECS: no process is left on any node (waits up to SECS for exiting ones); else fails
# naming them.
nodes_empty() {
  local i h p left
  for i in $(seq 1 $(($1 * 10))); do
    left=""
    for h in "${cluster_nodes[@]}"; do
      for p in $(node_pids "$h"); do left+="$p on $h: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-100); "; done
    done
    [[ -z $left ]] && return 0
    sleep 0.1
  done
  fail "processes left $1 s after the job ended: $left"
}

# dtrain_pids: dtrain processes left in any node.
dtrain_pids() {
  local h p
  for h in "${cluster_nodes[@]}"; do
    for p in $(node_pids "$h"); do
      [[ $(cat "/proc/$p/comm" 2>/dev/null) == dtrain ]] && echo "$p ($h)"
    done
  done
  return 0
}

# close_model A B [TOL]: the model tensors of two checkpoints' state.pt at the same step differ by
# less than TOL (default 1e-5) relative to B's, tensor by tensor (||a - b|| / ||b||, as the dist
# tier's equivalence tests); prints the largest difference.
close_model() {
  "$py" - "$1/state.pt" "$2/state.pt" "${3:-1e-5}" <<'PY' || fail "the checkpoints $1 and $2 hold models further apart than ${3:-1e-5}"
import sys, torch
a, b = (torch.load(f, weights_only=False) for f in sys.argv[1:3])
tol = float(sys.argv[3])
assert a["step"] == b["step"], (a["step"], b["step"])
worst, name = 0.0, ""
for k in b["model"]:
    x, y = a["model"][k].double(), b["model"][k].double()
    d = ((x - y).norm() / max(y.norm().item(), 1e-12)).item()
    if d > worst: worst, name = d, k
print(f"step {a['step']}: largest relative difference {worst:.3g} ({name}), tolerance {tol:g}")
assert worst < tol, (name, worst)
PY
}

# moved A B: the models of two checkpoints differ by more than 1e-2 (relative): training moved the
# parameters between them, so that an equality between runs is not that of untrained models.
moved() {
  "$py" - "$1/state.pt" "$2/state.pt" <<'PY' || fail "the models of $1 and $2 hardly differ: the comparison would prove nothing"
import sys, torch
a, b = (torch.load(f, weights_only=False) for f in sys.argv[1:3])
d = max(((a["model"][k].double() - b["model"][k].double()).norm() / b["model"][k].double().norm()).item()
        for k in b["model"] if b["model"][k].is_floating_point() and b["model"][k].norm() > 0)
print(f"training moved the model by {d:.3g} (relative) from step {a['step']} to step {b['step']}")
assert d > 1e-2, d
PY
}

# checkpoint RUN STEP: the path of run RUN's checkpoint at STEP (it must be complete).
checkpoint() {
  local ck
  ck=$(printf '%s/runs/%s/checkpoints/step-%09d' "$tmp" "$1" "$2")
  [[ -f $ck/COMPLETE ]] || fail "no complete checkpoint $ck"
  echo "$ck"
}
