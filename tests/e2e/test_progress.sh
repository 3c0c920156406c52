#!/usr/bin/env bash
# e2e: the progress line (run.progress). Under a pseudo-terminal (util-linux `script`) rank 0
# redraws one live line in place ("\r" ... clear to the end of the line) with the ETA, and ends
# it with a newline before the next log line; with stdout in a file it prints plain lines that
# start with an ISO-8601 timestamp and hold no "\r"; under mpirun -np 2 only rank 0 prints
# progress (also with run.progress=live); run.progress=off and run.quiet print none; with
# train.max_steps inside the first epoch the lines count one epoch, the evaluations inside it say
# their step, and its save is not called the end of an epoch.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup progress
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}
command -v script >/dev/null || fail "util-linux's script is needed (apt-get install bsdutils)"

printf 'run:\n  name: p\n' >"$tmp/p.yaml"
# 1024 samples / 32 = 32 steps per epoch, 2 epochs; the loss is read every 4 steps.
train=(run.dir="$tmp/runs" run.log_every=4 run.threads=1 data.format=synthetic
  data.synthetic_task=classification data.synthetic_classes=4 data.synthetic_size=1024
  data.synthetic_test_size=128 data.workers=0 model.name=mlp model.hidden=32
  train.loss=cross_entropy train.optimizer=sgd train.lr=0.1 train.global_batch=32 train.epochs=2)

# Under a pseudo-terminal: stdout and stderr are the same terminal, so auto means live.
cmd=$(printf '%q ' "$bin" "$tmp/p.yaml" "${train[@]}" run.name=tty)
run 300 tty script -q -e -c "$cmd" /dev/null
expect_ok tty
"$py" - "$tmp/tty.out" <<'PY' || { show tty; fail "tty: no live progress line"; }
import re, sys
out = open(sys.argv[1], "rb").read()
redraws = re.findall(rb"\repoch \d+/2 step (\d+)/64 [^\r\n]*?ETA [^\r\n]*?\x1b\[K", out)
if len(redraws) < 16:
    sys.exit("%d redraws of the live line ('\\r' epoch ... ETA ... clear), expected >= 16" % len(redraws))
if int(redraws[-1]) != 64:
    sys.exit("the last redraw is at step %s, not 64" % redraws[-1].decode())
# Each live line ends with a newline before the next log line (the terminal shows "\r\n").
ends = re.findall(rb"\x1b\[K\r?\n(epoch \d+/2  train loss|done: )", out)
if len(ends) < 2:
    sys.exit("the live line was not ended by a newline before the evaluation / summary lines")
if re.search(rb"\x1b\[K[^\r\n]", out):
    sys.exit("text written onto the live line without a newline first")
if not re.search(rb"\ndone: [^\r\n]*\r?\n", out) or not out.endswith(b"\n"):
    sys.exit("no 'done:' line of its own, or output that does not end with a newline")
print("ok: %d redraws in place, with ETA, each live line ended by a newline" % len(redraws))
PY

# stdout in a file: plain timestamped lines (auto means lines), no carriage return.
run 300 file "$bin" "$tmp/p.yaml" "${train[@]}" run.name=file
expect_ok file
if grep -q $'\r' "$tmp/file.out"; then fail "file: a carriage return in a file's output"; fi
ts='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2}'
n=$(grep -cE "^$ts epoch [12]/2 step [0-9]+/64  loss [0-9.]+  lr [0-9.e-]+  [0-9]+ samples/s  elapsed [0-9hms]+  ETA [0-9hms-]+$" "$tmp/file.out" || true)
[[ $n == 16 ]] || { show file; fail "file: $n timestamped progress lines, expected 16 (every 4th of 64 steps)"; }
grep -qE "^$ts epoch 2/2 step 64/64 .* ETA 0s$" "$tmp/file.out" || { show file; fail "file: no final line with ETA 0s"; }
grep -qE "^$ts epoch 1/2  train loss [0-9.]+  test loss" "$tmp/file.out" || { show file; fail "file: no timestamped evaluation line"; }
echo "ok: 16 timestamped progress lines in a file, no carriage returns"

# Two ranks: only rank 0 prints progress, whether auto (lines: stderr is a pipe) or live.
for mode in auto live; do
  run 300 "mpi_$mode" "$mpiexec" "${mpi_flags[@]}" --tag-output -np 2 "$bin" "$tmp/p.yaml" "${train[@]}" \
    run.name="mpi_$mode" run.progress="$mode"
  expect_ok "mpi_$mode"
  if grep -a '^\[1,1\]<stdout>:' "$tmp/mpi_$mode.out" | grep -qa 'step '; then
    show "mpi_$mode"; fail "mpi_$mode: rank 1 printed progress"
  fi
  n=$(grep -a '^\[1,0\]<stdout>:' "$tmp/mpi_$mode.out" | grep -oa 'step [0-9]*/64' | wc -l)
  [[ $n -ge 16 ]] || { show "mpi_$mode"; fail "mpi_$mode: $n progress lines from rank 0, expected >= 16"; }
done
grep -aqE "^\[1,0\]<stdout>:$ts epoch 1/2 step 4/64 " "$tmp/mpi_auto.out" ||
  { show mpi_auto; fail "mpi_auto: rank 0's lines are not timestamped (auto under mpirun is lines)"; }
echo "ok: under mpirun -np 2 only rank 0 prints progress"

for off in run.progress=off run.quiet=true; do
  name=${off//[.=]/_}
  run 300 "$name" "$bin" "$tmp/p.yaml" "${train[@]}" run.name="$name" "$off"
  expect_ok "$name"
  if grep -q 'step [0-9]*/64' "$tmp/$name.out"; then show "$name"; fail "$off: progress was printed"; fi
done
grep -q "epoch 2/2  train loss" "$tmp/run_progress_off.out" || fail "run.progress=off hid the evaluation lines"
echo "ok: run.progress=off and run.quiet print no progress"

# train.max_steps 20 of 2 epochs of 32 steps, evaluating every 8 steps and saving each epoch: the
# lines count one epoch (not 1/2), evaluations inside it say their step, and the save at step 20
# is not called the end of epoch 1.
run 300 max "$bin" "$tmp/p.yaml" "${train[@]}" run.name=max train.max_steps=20 train.eval_every_steps=8 \
  checkpoint.every_epoch=true
expect_ok max
grep -qE "^$ts epoch 1/1 step 20/20  loss .* ETA 0s$" "$tmp/max.out" || { show max; fail "max: no 'epoch 1/1 step 20/20' line"; }
if grep -q "epoch [0-9]/2" "$tmp/max.out"; then show max; fail "max: the lines count epochs the run does not reach"; fi
for s in 8 16 20; do
  grep -qE "^$ts epoch 1/1 step $s/20  train loss [0-9.]+  test loss" "$tmp/max.out" ||
    { show max; fail "max: the evaluation at step $s does not say its step"; }
done
if grep -q "end of epoch" "$tmp/max.out"; then show max; fail "max: step 20 of 32 called the end of an epoch"; fi
grep -qF "step-000000020 (step 20, " "$tmp/max.out" && grep -qF "end of training at step 20 (train.max_steps), within epoch 1)" "$tmp/max.out" ||
  { show max; fail "max: the save at step 20 does not say why"; }
echo "ok: train.max_steps inside an epoch: $(grep -m1 -oE 'epoch 1/1 step 8/20  train loss.*' "$tmp/max.out")"
echo "PASS"
