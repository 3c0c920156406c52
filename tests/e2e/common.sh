# Shared by the e2e scripts (sourced, not run): environment, temp dir, run-with-a-time-limit and
# the checks of a run's exit and output, the reference Python, the Fashion-MNIST files.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS; DTRAIN_FASHION_MNIST (e2e_fashion_mnist's folder).
# Usage: source "$(dirname "${BASH_SOURCE[0]}")/common.sh"; e2e_setup NAME

src=${DTRAIN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${DTRAIN_BIN:-$src/build/bin/dtrain}
mpiexec=${DTRAIN_MPIEXEC:-mpirun}
read -r -a mpi_flags <<<"${DTRAIN_MPI_FLAGS:---oversubscribe}"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1

fail() { echo "FAIL: $*" >&2; exit 1; }

# e2e_setup NAME: check the binary, make $tmp (removed on exit).
e2e_setup() {
  [[ -x $bin ]] || fail "dtrain binary not found: $bin (build it first)"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-e2e-$1.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
}

# run LIMIT_S NAME CMD...: stdout/stderr to $tmp/NAME.{out,err}; sets $rc; a hang is a failure.
run() {
  local limit=$1 name=$2
  shift 2
  echo "+ $*"
  rc=0
  timeout -k 10 "$limit" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [[ $rc == 124 || $rc == 137 ]]; then
    tail -n 20 "$tmp/$name.out" "$tmp/$name.err" >&2 || true
    fail "$name: did not finish within ${limit} s (hang?)"
  fi
}
show() { tail -n 30 "$tmp/$1.out" "$tmp/$1.err" >&2 || true; }

# expect_ok NAME: run NAME exited 0; else fails showing its output.
expect_ok() { [[ $rc == 0 ]] || { show "$1"; fail "$1: exited with code $rc"; }; }

# has_out NAME TEXT...: each TEXT is in run NAME's standard output.
has_out() {
  local name=$1 s
  shift
  for s in "$@"; do
    grep -qF -- "$s" "$tmp/$name.out" || { show "$name"; fail "$name: stdout lacks '$s'"; }
  done
}

# has NAME TEXT...: each TEXT is in run NAME's output, standard output or standard error.
has() {
  local name=$1 t
  shift
  for t in "$@"; do
    grep -qF -- "$t" "$tmp/$name.out" "$tmp/$name.err" || { show "$name"; fail "$name: the output lacks '$t'"; }
  done
}

# e2e_torch_python: $py runs the reference Python (DTRAIN_REF_PYTHON, else Debian's
# /usr/bin/python3), which must have torch (Debian's python3-torch): `"$py" - ARGS <<'PY'` and
# `"$py" -c CODE ARGS` as with that Python itself, each script in a fork of a server that imported
# torch once for the test (tests/support/ref_python.py).
# $pyexe is that Python itself, for a script that must be the process it starts (exec, setsid).
e2e_torch_python() {
  local ref=${DTRAIN_REF_PYTHON:-/usr/bin/python3}
  pyexe=$ref
  "$ref" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null ||
    fail "$ref cannot import torch: install Debian's python3-torch (apt-get install python3-torch)"
  local server=$src/tests/support/ref_python.py
  "$ref" "$server" serve "$tmp/ref_python.sock" </dev/null >>"$tmp/ref_python.log" 2>&1 &
  py=$tmp/python
  printf '#!/bin/sh\nexec '\''%s'\'' -S '\''%s'\'' run '\''%s'\'' '\''%s'\'' "$@"\n' \
    "$ref" "$server" "$tmp/ref_python.sock" "$ref" >"$py"
  chmod +x "$py"
}

# e2e_fashion_mnist [FILE]: $data is the Fashion-MNIST folder (DTRAIN_FASHION_MNIST, else Debian's
# dataset-fashion-mnist), which must hold FILE (default: the training images).
e2e_fashion_mnist() {
  data=${DTRAIN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  [[ -f $data/${1:-train-images-idx3-ubyte.gz} ]] ||
    fail "Fashion-MNIST not found in $data (apt-get install dataset-fashion-mnist, or set DTRAIN_FASHION_MNIST)"
}

# same_model A B: the model tensors of two checkpoints' state.pt are equal (bit for bit).
same_model() {
  "$py" - "$1/state.pt" "$2/state.pt" <<'PY' || fail "the checkpoints $1 and $2 hold different models"
import sys, torch
a, b = (torch.load(f, weights_only=False) for f in sys.argv[1:3])  # state.pt holds typed dicts
assert a["step"] == b["step"], (a["step"], b["step"])
for k in a["model"]:
    assert torch.equal(a["model"][k], b["model"][k]), k
for k in a["optimizer"]:
    assert torch.equal(a["optimizer"][k], b["optimizer"][k]), k
print("same model and optimizer state at step", a["step"])
PY
}

# wait_for_training DIR: until DIR/metrics.jsonl has a record (the ranks are past set-up).
wait_for_training() {
  for _ in $(seq 1 600); do
    [[ -s $1/metrics.jsonl ]] && return 0
    sleep 0.1
  done
  fail "no training record in $1/metrics.jsonl after 60 s"
}
