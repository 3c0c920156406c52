#!/usr/bin/env bash
# e2e: the dtrain binary run alone, with no MPI launcher (world size 1): --help, --version,
# --print-config, and short trainings on synthetic data (configs/synthetic_linear.yaml, and a
# config built from overrides only).
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup single

# --help: usage, launchers, every model, keys from the schema with types and defaults.
run 30 help "$bin" --help
expect_ok help
has_out help "Usage:" "--print-config" "--version" "mpirun -np" \
  "cnn:" "mlp:" "linear:" \
  "train.global_batch (int, default " "train.micro_batch" "train.lr" "run.timeout_s" \
  "data.format" "model.name" "dist.backend" "idx | synthetic"
echo "ok: --help lists models and keys"

# --version: "dtrain X.Y.Z (...)", matching the project version in CMakeLists.txt.
run 30 version "$bin" --version
expect_ok version
grep -qE '^dtrain [0-9]+\.[0-9]+\.[0-9]+ ' "$tmp/version.out" || { show version; fail "--version: unexpected '$(head -n1 "$tmp/version.out")'"; }
want=$(sed -nE 's/^project\(dtrain VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
[[ -z $want ]] || has_out version "dtrain $want "
echo "ok: --version: $(head -n1 "$tmp/version.out")"

# A command line that does not parse: exit 2 (docs/ERRORS.md's table), saying why.
run 30 noargs "$bin"
[[ $rc == 2 ]] || { show noargs; fail "dtrain without arguments: exit $rc, expected 2"; }
grep -q "config is required" "$tmp/noargs.err" "$tmp/noargs.out" || { show noargs; fail "no word of the missing config"; }
run 30 badopt "$bin" --no-such-option "$src/configs/synthetic_linear.yaml"
[[ $rc == 2 ]] || { show badopt; fail "an unknown option: exit $rc, expected 2"; }
echo "ok: a command line that does not parse exits 2"

# --print-config: resolves for world 1 and exits without training. stdout is the config alone, as
# YAML (the resolved note goes to stderr): loaded again as a config file it prints the same.
run 60 print "$bin" "$src/configs/synthetic_linear.yaml" --print-config train.global_batch=64 \
  run.name=yes data.test_images="''" model.hidden=[] data.path="#x: y"
expect_ok print
has_out print "format: synthetic" "global_batch: 64"
grep -q "# resolved: world 1, per-rank batch 64" "$tmp/print.err" || { show print; fail "--print-config: no resolved note on stderr"; }
if grep -qvE '^([a-z]+:|  [a-z_0-9]+: .*)$' "$tmp/print.out"; then show print; fail "--print-config: stdout holds more than the YAML"; fi
if grep -q "^final test" "$tmp/print.out"; then fail "--print-config trained a model"; fi
cp "$tmp/print.out" "$tmp/printed.yaml"
run 60 reprint "$bin" "$tmp/printed.yaml" --print-config
expect_ok reprint
cmp "$tmp/print.out" "$tmp/reprint.out" || { diff "$tmp/print.out" "$tmp/reprint.out" >&2; fail "--print-config: its output does not load as the same config"; }
echo "ok: --print-config prints YAML that loads again as the same config"

# Linear regression on synthetic data: the shipped config, alone.
run 120 linear "$bin" "$src/configs/synthetic_linear.yaml" run.dir="$tmp/runs"
expect_ok linear
has_out linear "world 1 rank(s)" "model: linear, 11 parameters"
loss=$(sed -nE 's/^final test loss: ([0-9.eE+-]+).*/\1/p' "$tmp/linear.out" | tail -n 1)
[[ -n $loss ]] || { show linear; fail "linear: no 'final test loss: X' line"; }
# Targets carry noise 0.01 (variance 1e-4): a fitted Linear(10,1) gets close to that.
awk -v l="$loss" 'BEGIN { exit !(l < 0.01) }' || fail "linear: final test loss $loss is not below 0.01"
[[ -s $tmp/runs/synthetic_linear/config.yaml && -s $tmp/runs/synthetic_linear/metrics.jsonl ]] ||
  fail "linear: run directory $tmp/runs/synthetic_linear lacks config.yaml or metrics.jsonl"
echo "ok: synthetic linear regression alone, final test loss $loss"

# A config that names almost nothing: everything else from the defaults and overrides.
printf 'run:\n  name: mini\n' >"$tmp/mini.yaml"
run 120 mini "$bin" "$tmp/mini.yaml" run.dir="$tmp/runs" run.quiet=true \
  data.format=synthetic data.synthetic_task=classification data.synthetic_classes=4 \
  data.synthetic_size=2048 data.synthetic_test_size=512 data.workers=0 \
  model.name=mlp model.hidden=32,16 train.loss=cross_entropy train.optimizer=sgd \
  train.lr=0.1 train.momentum=0.9 train.global_batch=64 train.micro_batch=16 train.epochs=2
expect_ok mini
grep -qE '^final test accuracy: [0-9.]+%' "$tmp/mini.out" || { show mini; fail "mini: no 'final test accuracy' line"; }
grep -q "micro_batch: 16" "$tmp/runs/mini/config.yaml" || fail "mini: config.yaml does not hold train.micro_batch=16"
grep -q "accumulation steps 4" "$tmp/runs/mini/config.yaml" || fail "mini: 64/16 should resolve to 4 accumulation steps"
echo "ok: overrides-only synthetic classification (mlp, sgd, accumulation 4): $(grep '^final test' "$tmp/mini.out")"
echo "PASS"
