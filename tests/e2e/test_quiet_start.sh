#!/usr/bin/env bash
# e2e: a quiet start, one line per error (issue 29, points 4 and 5). A run's log has one line on
# the config (the batch arithmetic, where config.yaml is), not the config; config.yaml loads
# again and --print-config prints the same settings without MPI or training (once under mpirun,
# resolved for its world). An error every rank finds (a config typo, a missing data file, a
# model the sharded optimizer cannot split over the ranks) is printed once, by rank 0, and the job exits 1 without Open MPI's MPI_ABORT banner or
# ORTE_ERROR_LOG lines. What can be known from the config is refused before start-up
# (run.profile_steps on a LibTorch without Kineto, pointing to run.timeline); an empty training
# file is named as empty. SIGINT to a bare mpirun: the ranks stop with 75 and say that mpirun
# returns 1; SIGUSR1 to it: mpirun returns 75.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup quiet
cfg=$src/configs/synthetic_linear.yaml
small=(data.synthetic_size=1024 train.epochs=1 train.global_batch=128 run.log_every=4)
np2=("$mpiexec" "${mpi_flags[@]}" -np 2 "$bin")

# 1. The log shows the config in one line; config.yaml holds it all, as --print-config prints it.
run 60 one "$bin" "$cfg" "${small[@]}" run.dir="$tmp/runs" run.name=one
[[ $rc == 0 ]] || { show one; fail "a short run: exit $rc"; }
grep -q "^config: .*synthetic_linear.yaml, resolved for world 1: global batch 128 = 1 rank(s) x 128 per rank, micro-batch 128 x 1 accumulation step(s); every setting in $tmp/runs/one/config.yaml$" "$tmp/one.out" ||
  { show one; fail "no config line with the batch arithmetic"; }
! grep -qE '^(run|train):$|^  log_every:' "$tmp/one.out" || { show one; fail "the log prints the config"; }
(($(wc -l <"$tmp/one.out") <= 30)) || { show one; fail "$(wc -l <"$tmp/one.out") lines of log for a short run"; }
run 30 print "$bin" "$cfg" "${small[@]}" run.dir="$tmp/runs" run.name=one --print-config
[[ $rc == 0 ]] || { show print; fail "--print-config: exit $rc"; }
diff <(grep -v '^#' "$tmp/runs/one/config.yaml") "$tmp/print.out" >&2 || fail "config.yaml and --print-config differ"
run 30 print_again "$bin" "$tmp/runs/one/config.yaml" --print-config
cmp -s "$tmp/print.out" "$tmp/print_again.out" || fail "config.yaml does not load again as the same config"
[[ ! -e $tmp/runs/one/metrics.jsonl.1 ]] && echo "ok: one config line in the log; config.yaml = --print-config, and it loads again"

run 60 print_np2 "${np2[@]}" "$cfg" --print-config
[[ $rc == 0 ]] || { show print_np2; fail "--print-config under mpirun: exit $rc"; }
[[ $(grep -c '^run:$' "$tmp/print_np2.out") == 1 ]] || { show print_np2; fail "--print-config printed other than once on 2 ranks"; }
grep -q "^# resolved: world 2, per-rank batch 64" "$tmp/print_np2.err" || { show print_np2; fail "not resolved for world 2"; }
echo "ok: --print-config under mpirun -np 2: once, resolved for world 2"

# 2. One line per error, exit 1, no MPI_ABORT banner.
one_error() {  # NAME PATTERN: exit 1, exactly one error line (rank 0's) matching PATTERN, no banner
  [[ $rc == 1 ]] || { show "$1"; fail "$1: exit $rc, expected 1"; }
  [[ $(grep -c 'error: ' "$tmp/$1.err") == 1 ]] || { show "$1"; fail "$1: not exactly one error line"; }
  grep -qE "^\[rank 0\] error: $2" "$tmp/$1.err" || { show "$1"; fail "$1: the error does not match /$2/"; }
  ! grep -qE 'MPI_ABORT|ORTE_ERROR_LOG' "$tmp/$1.err" || { show "$1"; fail "$1: Open MPI's abort banner"; }
  echo "ok: $1: one line, exit 1: $(grep -m1 -o 'error: .*' "$tmp/$1.err" | cut -c1-100)"
}
run 60 typo "${np2[@]}" "$cfg" train.lrr=1
one_error typo "train\.lrr: unknown key .*did you mean 'train\.lr'"
run 60 batch "${np2[@]}" "$cfg" train.global_batch=3
one_error batch "train\.global_batch: .*not divisible by the world size 2"
run 60 nodata "${np2[@]}" "$src/configs/fashion_mnist.yaml" data.path="$tmp/none" run.dir="$tmp/runs"
one_error nodata "data\.train_images: file not found: $tmp/none/"
run 30 print_typo "$bin" "$cfg" train.lrr=1 --print-config
one_error print_typo "train\.lrr: unknown key"
# Found after start-up, alike on every rank: the linear model of one feature has 2 values, which
# cannot be sharded over 3 ranks.
run 60 shard "$mpiexec" "${mpi_flags[@]}" -np 3 "$bin" "$cfg" train.epochs=1 train.global_batch=96 run.dir="''" \
  dist.shard_optimizer=true data.synthetic_features=1
one_error shard "dist\.shard_optimizer: .*leave rank 2 none \(use at most 2 ranks"

# 3. Known at config time: the profiler on a LibTorch without Kineto (Debian's 1.13).
run 60 profile "$bin" "$cfg" "${small[@]}" run.dir="''" run.profile_steps=2
if [[ $rc == 0 ]]; then
  echo "skip: this LibTorch writes profiler traces (Kineto): nothing to refuse"
else
  one_error profile "run\.profile_steps: .*cannot write traces.*run\.timeline=true"
  ! grep -q '^dtrain ' "$tmp/profile.out" || fail "run.profile_steps was refused after start-up, not at the config check"
fi

# 4. An empty training file is named as empty, not as a label problem of another file.
"${DTRAIN_REF_PYTHON:-/usr/bin/python3}" - "$tmp" <<'PY'
import gzip, struct, sys
def write(name, dims, data):
    with gzip.open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", x) for x in dims) + bytes(data))
write("tr-img.gz", [0, 2, 2], []); write("tr-lab.gz", [0], [])
write("te-img.gz", [4, 2, 2], range(16)); write("te-lab.gz", [4], [0, 1, 2, 3])
PY
for norm in true false; do
  run 60 "empty_$norm" "$bin" "$cfg" data.format=idx data.path="$tmp" data.train_images=tr-img.gz \
    data.train_labels=tr-lab.gz data.test_images=te-img.gz data.test_labels=te-lab.gz model.name=mlp \
    train.loss=cross_entropy data.normalize=$norm run.dir="''"
  one_error "empty_$norm" "$tmp/tr-img\.gz: the training split is empty"
done

# 5. Signals to a bare mpirun: SIGINT reaches the ranks as SIGTERM and mpirun returns 1 whatever
# they exit with (the run says so); SIGUSR1 is passed on and mpirun returns the ranks' 75.
# After SIGINT mpirun SIGKILLs the ranks one second later (and reads none of their output while
# it waits): the ranks must reach a step boundary and write their checkpoint within it on a loaded
# machine (the suite runs tests side by side), so the run does no evaluation and no epoch-end
# checkpoint of its own and logs rarely.
for sig in INT USR1; do
  "${np2[@]}" "$cfg" run.dir="$tmp/runs" run.name="sig$sig" train.epochs=1000 run.log_every=200 \
    train.eval=false checkpoint.every_epoch=false >"$tmp/sig$sig.out" 2>"$tmp/sig$sig.err" &
  job=$!
  wait_for_training "$tmp/runs/sig$sig"
  kill -"$sig" "$job"
  rc=0
  wait "$job" || rc=$?
  grep -q "exit code 75" "$tmp/sig$sig.out" || { show "sig$sig"; fail "SIG$sig: the ranks did not stop with 75"; }
  if [[ $sig == INT ]]; then
    [[ $rc == 1 ]] || { show sigINT; fail "SIGINT to mpirun: it returned $rc; Open MPI 4.1 returns 1 (docs/CHECKPOINTS.md)"; }
    grep -q "mpirun returns 1 whatever the ranks' exit code" "$tmp/sigINT.out" || { show sigINT; fail "the run does not say what mpirun returns"; }
  else
    [[ $rc == 75 ]] || { show sigUSR1; fail "SIGUSR1 to mpirun: it returned $rc, expected 75"; }
  fi
  echo "ok: SIG$sig to a bare mpirun: the ranks exit 75, mpirun returns $rc"
done
echo "PASS"
