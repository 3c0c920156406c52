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

# A mistyped subcommand is said to be one (not "cannot open the config file"), with its fix.
expect_error subcommand_slip 30 \
  "^\[rank 0\] error: 'evaal' is neither a subcommand nor a config file && did you mean 'dtrain eval' && env, bench, eval and predict" \
  -- "$bin" evaal "$cfg"

# A slip in model.name is named with its fix before any data is read (the data path does not exist).
expect_error model_name_slip 30 \
  "^\[rank 0\] error: .*model\.name && 'resnet5' && did you mean 'resnet50'" \
  -- "$bin" "$fashion" model.name=resnet5 data.path="$tmp/nonexistent" run.dir="$tmp/runs"

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

# --- config files that are not one map of sections, once -------------------------------------
printf 'train:\n  lr: 0.1\n  epochs: 2\n  lr: 0.2\n' >"$tmp/dup_key.yaml"
expect_error duplicate_key 30 \
  "^\[rank 0\] error: train\.lr: duplicate key && dup_key\.yaml:4:3 && first at .*dup_key\.yaml:2:3" \
  -- "$bin" "$tmp/dup_key.yaml"

printf 'train:\n  lr: 0.1\nmodel:\n  name: linear\ntrain:\n  epochs: 2\n' >"$tmp/dup_section.yaml"
expect_error duplicate_section 30 \
  "^\[rank 0\] error: train: duplicate section && dup_section\.yaml:5:1 && first at .*dup_section\.yaml:1:1" \
  -- "$bin" "$tmp/dup_section.yaml"

: >"$tmp/empty.yaml"
expect_error empty_config 30 "^\[rank 0\] error: .*empty\.yaml: the config is empty" -- "$bin" "$tmp/empty.yaml"

printf '# run:\n#   name: x\n\n' >"$tmp/comments.yaml"
expect_error comments_only_config 30 "^\[rank 0\] error: .*comments\.yaml: the config is empty" \
  -- "$bin" "$tmp/comments.yaml"

expect_error directory_as_config 30 "^\[rank 0\] error: $tmp/empty: is a directory" -- "$bin" "$tmp/empty"

printf -- '- run\n- train\n' >"$tmp/list.yaml"
expect_error config_not_a_map 30 "^\[rank 0\] error: .*list\.yaml:1:1: the top level must be a map" \
  -- "$bin" "$tmp/list.yaml"

printf 'train:\n  lr: 0.1\n---\ntrain:\n  lr: 0.2\n' >"$tmp/two_docs.yaml"
expect_error two_yaml_documents 30 "^\[rank 0\] error: .*two_docs\.yaml: the config holds 2 YAML documents" \
  -- "$bin" "$tmp/two_docs.yaml"

# --- overrides ---------------------------------------------------------------------------------
expect_error override_of_a_section 30 "^\[rank 0\] error: train: 'train' is a section" -- "$bin" "$cfg" train=1
expect_error override_empty_value 30 "^\[rank 0\] error: train\.lr: empty value" -- "$bin" "$cfg" train.lr=
expect_error override_twice 30 "^\[rank 0\] error: train\.lr: set twice on the command line" \
  -- "$bin" "$cfg" train.lr=0.1 train.lr=0.2
expect_error list_with_empty_entry 30 "^\[rank 0\] error: model\.hidden: an empty entry && '8,,4'" \
  -- "$bin" "$cfg" model.hidden=8,,4
expect_error number_with_junk 30 "^\[rank 0\] error: train\.epochs: .*'3x'" -- "$bin" "$cfg" train.epochs=3x

# --- run.name must stay inside run.dir ------------------------------------------------------------
for name in .. ../x a/../../b /tmp/x; do
  expect_error "run_name_${name//[^a-z]/_}" 30 "^\[rank 0\] error: run\.name: '$name' && inside run\.dir" \
    -- "$bin" "$cfg" run.dir="$tmp/runs" run.name="$name"
done
expect_error run_name_empty 30 "^\[rank 0\] error: run\.name: '' is empty while run\.dir is set" \
  -- "$bin" "$cfg" run.dir="$tmp/runs" run.name="''"
[[ ! -e $tmp/x && ! -e $tmp/b ]] || { echo "FAIL: a run.name outside run.dir was written" >&2; failures=$((failures + 1)); }

# --- labels outside the classes (small IDX files) ----------------------------------------------
mkdir -p "$tmp/idx"
/usr/bin/python3 - "$tmp/idx" <<'PY'
import gzip, struct, sys
d = sys.argv[1]
def write(name, dims, data):
    with gzip.open(f"{d}/{name}", "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", x) for x in dims) + bytes(data))
write("tr-img.gz", [8, 2, 2], [i % 256 for i in range(32)])
write("tr-lab.gz", [8], [0, 1, 2, 3, 0, 1, 2, 3])
write("tr-lab-200.gz", [8], [0, 1, 2, 3, 0, 200, 2, 3])
write("te-img.gz", [4, 2, 2], [i % 256 for i in range(16)])
write("te-lab-9.gz", [4], [0, 1, 9, 3])
PY
idx_args=(data.format=idx data.path="$tmp/idx" data.train_images=tr-img.gz data.test_images=te-img.gz
  model.name=mlp train.loss=cross_entropy train.global_batch=4 run.dir="$tmp/runs")
expect_error train_label_beyond_num_classes 60 \
  "^\[rank 0\] error: .*tr-lab-200\.gz: label 200 of sample 5 && \[0, 10\) && data\.num_classes" \
  -- "$bin" "$cfg" "${idx_args[@]}" data.train_labels=tr-lab-200.gz data.test_labels=tr-lab.gz data.num_classes=10
expect_error test_label_beyond_train_classes 60 \
  "^\[rank 0\] error: .*te-lab-9\.gz: label 9 of sample 2 && \[0, 4\) && from the train labels" \
  -- "$bin" "$cfg" "${idx_args[@]}" data.train_labels=tr-lab.gz data.test_labels=te-lab-9.gz

# --- a loss for the other kind of data -----------------------------------------------------------
expect_error mse_on_classes 60 "^\[rank 0\] error: train\.loss: mse needs regression targets && classification" \
  -- "$bin" "$cfg" data.synthetic_task=classification train.loss=mse run.dir="$tmp/runs"
expect_error cross_entropy_on_regression 60 "^\[rank 0\] error: train\.loss: cross_entropy needs class ids && regression" \
  -- "$bin" "$cfg" train.loss=cross_entropy run.dir="$tmp/runs"

# --- sizes past the machine or int64 --------------------------------------------------------------
expect_error synthetic_size_past_memory 60 \
  "^\[rank 0\] error: data\.synthetic_size, .*data\.synthetic_features: .*of host memory, more than this machine's && lower data\.synthetic_size" \
  -- "$bin" "$cfg" data.synthetic_size=1e11 run.dir="$tmp/runs"
expect_error model_past_memory 60 \
  "^\[rank 0\] error: model\.hidden.*: building the model mlp ran out of host memory && make the model smaller" \
  -- "$bin" "$cfg" model.name=mlp model.hidden=10000000000000 run.dir="$tmp/runs"
expect_error epochs_overflow 60 "^\[rank 0\] error: train\.epochs: .*overflows the step count" \
  -- "$bin" "$cfg" train.epochs=2e18 run.dir="$tmp/runs"

# --- output that cannot be written -------------------------------------------------------------
mkdir -p "$tmp/full/r"
ln -s /dev/full "$tmp/full/r/metrics.jsonl"
expect_error metrics_on_full_disk 60 "^\[rank 0\] error: .*$tmp/full/r/metrics\.jsonl && No space left on device" \
  -- "$bin" "$cfg" run.dir="$tmp/full" run.name=r run.log_every=1
expect_error stdout_on_full_disk 60 "^\[rank 0\] error: stdout: writing standard output failed: No space left on device" \
  -- bash -c '"$0" "$@" >/dev/full' "$bin" "$cfg" run.dir="''"

# --- two ranks: every case ends (no hang) and the failing rank says who it is (an error every
# rank finds is printed once, by rank 0: tests/e2e/test_quiet_start.sh) ------------------------
expect_error np2_global_batch_not_divisible 90 \
  "^\[rank 0\] error: .*train\.global_batch" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" train.global_batch=3

expect_error np2_unknown_key 90 "^\[rank [01]\] error: .*train\.lrr" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" train.lrr=1

expect_error np2_unknown_model 90 \
  "^\[rank 0\] error: .*model\.name" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" model.name=nope

expect_error np2_missing_data 90 "^\[rank [01]\] error: .*$tmp/nonexistent/train-images-idx3-ubyte.gz" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$fashion" data.path="$tmp/nonexistent"

# Only rank 0 writes the run directory: when it cannot, rank 0 alone fails while rank 1 goes on
# into training. The job must end promptly with rank 0's reason, not wait for rank 1's
# watchdog (run.timeout_s, 60 s in this config).
touch "$tmp/a_file"
expect_error np2_one_rank_fails 50 "^\[rank 0\] error: .*$tmp/a_file" \
  -- "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" run.dir="$tmp/a_file" train.epochs=50

# A config without a data section trains on the default data, and says so.
printf 'model: {name: mlp, hidden: [8]}\ntrain: {max_steps: 1, eval: false}\ncheckpoint: {every_epoch: false}\n' >"$tmp/nodata.yaml"
if timeout 120 "$bin" "$tmp/nodata.yaml" run.dir="$tmp/runs" run.name=nodata >"$tmp/nodata.out" 2>&1 &&
  grep -q "the config sets no data.\* key: training on dtrain's default data" "$tmp/nodata.out"; then
  echo "ok: nodata: $(grep -m1 "default data" "$tmp/nodata.out")"
else
  tail -5 "$tmp/nodata.out" >&2
  echo "FAIL: nodata: a config without data trained without saying on what" >&2
  failures=$((failures + 1))
fi

if ((failures > 0)); then
  echo "FAIL: $failures case(s) above" >&2
  exit 1
fi
echo "PASS"
