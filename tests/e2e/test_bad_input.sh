#!/usr/bin/env bash
# e2e: bad input fails fast and says what is wrong. Every case must exit non-zero within its
# timeout (a hang fails the test) and print, on stderr, "[rank R] error: ..." naming the key or
# file at fault. Cases under `mpirun -np 2` must also not hang and must label each rank.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup bad

# Synthetic data, so that every case fails on the input under test and nothing else.
cfg=$tmp/ok.yaml
cat >"$cfg" <<'YAML'
run:
  name: bad_input
  timeout_s: 60
model:
  name: linear
data:
  format: synthetic
  synthetic_size: 512
  synthetic_test_size: 128
  workers: 0
train:
  epochs: 1
  global_batch: 64
  optimizer: adam
  lr: 0.01
  loss: mse
YAML
fashion=$src/configs/fashion_mnist.yaml

failures=0
# expect_error NAME LIMIT_S PATTERNS -- CMD...
#   PATTERNS: extended regexes joined by ' && '; stderr must match every one.
#   Passes when CMD exits non-zero (not by the timeout) and every pattern matches stderr.
expect_error() {
  local name=$1 limit=$2 patterns=$3
  shift 4  # NAME LIMIT PATTERNS --
  local out=$tmp/$name.out err=$tmp/$name.err rc=0 why="" start end
  start=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$out" 2>"$err" </dev/null || rc=$?
  end=$(date +%s)
  if [[ $rc == 124 || $rc == 137 ]]; then
    why="did not finish within ${limit} s (hang?)"
  elif [[ $rc == 0 ]]; then
    why="exited with code 0"
  else
    local p rest=$patterns
    while [[ -n $rest ]]; do
      p=${rest%% && *}
      [[ $rest == *" && "* ]] && rest=${rest#* && } || rest=""
      grep -qE -- "$p" "$err" || why+="stderr does not match /$p/; "
    done
  fi
  if [[ -n $why ]]; then
    failures=$((failures + 1))
    {
      echo "FAIL [$name]: $why"
      echo "  command: $*"
      echo "  exit code $rc after $((end - start)) s; stderr:"
      sed 's/^/    | /' "$err" | head -n 20
    } >&2
  else
    echo "ok   [$name] exit $rc in $((end - start)) s: $(grep -m1 'error:' "$err" || head -n1 "$err")"
  fi
}

# --- one process ------------------------------------------------------------------------------
expect_error missing_config 30 \
  "^\[rank 0\] error: .*$tmp/no_such.yaml && cannot open" \
  -- "$bin" "$tmp/no_such.yaml"

expect_error no_arguments 30 "config" -- "$bin"

expect_error missing_data_dir 60 \
  "^\[rank 0\] error: .*$tmp/nonexistent/train-images-idx3-ubyte.gz && data.path" \
  -- "$bin" "$fashion" data.path="$tmp/nonexistent" run.dir="$tmp/runs"

mkdir -p "$tmp/empty"
expect_error missing_data_file 60 \
  "^\[rank 0\] error: .*$tmp/empty/train-images-idx3-ubyte.gz" \
  -- "$bin" "$fashion" data.path="$tmp/empty" run.dir="$tmp/runs"

printf 'run:\n  name: x\n model:\n  name: cnn\n' >"$tmp/bad_indent.yaml"
expect_error yaml_bad_indent 30 \
  "^\[rank 0\] error: .*bad_indent\.yaml:3[:)] && malformed YAML" \
  -- "$bin" "$tmp/bad_indent.yaml"

printf 'run:\n  name: x\nmodel:\n  channels: [16, 32\n  fc: 64\ntrain:\n  lr: 0.1\n' >"$tmp/unclosed.yaml"
expect_error yaml_unclosed_bracket 30 \
  "^\[rank 0\] error: .*unclosed\.yaml:[0-9]+ && malformed YAML" \
  -- "$bin" "$tmp/unclosed.yaml"

expect_error unknown_model 30 \
  "^\[rank 0\] error: .*model\.name && 'nope' && cnn && linear && mlp" \
  -- "$bin" "$cfg" model.name=nope run.dir="$tmp/runs"

expect_error unknown_key_override 30 \
  "^\[rank 0\] error: .*train\.lrr && did you mean 'train\.lr'" \
  -- "$bin" "$cfg" train.lrr=1

printf 'train:\n  global_batch: 64\n  lrr: 0.1\n' >"$tmp/typo.yaml"
expect_error unknown_key_in_file 30 \
  "^\[rank 0\] error: .*train\.lrr && typo\.yaml:3 && did you mean 'train\.lr'" \
  -- "$bin" "$tmp/typo.yaml"

expect_error unknown_section 30 "^\[rank 0\] error: .*trian\.lr && did you mean 'train\.lr'" \
  -- "$bin" "$cfg" trian.lr=0.1

expect_error wrong_type_override 30 \
  "^\[rank 0\] error: .*train\.lr && 'abc'" \
  -- "$bin" "$cfg" train.lr=abc

printf 'train:\n  epochs: many\n' >"$tmp/type.yaml"
expect_error wrong_type_in_file 30 \
  "^\[rank 0\] error: .*train\.epochs && type\.yaml:2 && 'many'" \
  -- "$bin" "$tmp/type.yaml"

expect_error bad_choice 30 \
  "^\[rank 0\] error: .*train\.optimizer && sgd && adamw && 'lion'" \
  -- "$bin" "$cfg" train.optimizer=lion

expect_error override_without_equals 30 "^\[rank 0\] error: .*section\.key=value" \
  -- "$bin" "$cfg" train.lr

expect_error micro_batch_not_dividing 30 \
  "^\[rank 0\] error: .*train\.micro_batch && valid choices: 1, 2, 4, 8, 16, 32, 64" \
  -- "$bin" "$cfg" train.micro_batch=7

# --- two ranks: every case ends (MPI_Abort, no hang) and each failing rank says who it is -----
expect_error np2_global_batch_not_divisible 90 \
  "^\[rank 0\] error: .*train\.global_batch && ^\[rank 1\] error: .*train\.global_batch" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" train.global_batch=3

expect_error np2_unknown_key 90 "^\[rank [01]\] error: .*train\.lrr" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" train.lrr=1

expect_error np2_unknown_model 90 \
  "^\[rank 0\] error: .*model\.name && ^\[rank 1\] error: .*model\.name" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" model.name=nope

expect_error np2_missing_data 90 "^\[rank [01]\] error: .*$tmp/nonexistent/train-images-idx3-ubyte.gz" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$fashion" data.path="$tmp/nonexistent"

# Only rank 0 writes the run directory: when it cannot, rank 0 alone fails while rank 1 goes on
# into training. The job must end promptly with rank 0's reason, not wait for rank 1's
# watchdog (run.timeout_s, 60 s in this config).
touch "$tmp/a_file"
expect_error np2_one_rank_fails 50 "^\[rank 0\] error: .*$tmp/a_file" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" run.dir="$tmp/a_file" train.epochs=50

if ((failures > 0)); then
  echo "FAIL: $failures case(s) above" >&2
  exit 1
fi
echo "PASS"
