#!/usr/bin/env bash
# e2e: data errors are one line, as config errors are (issue 54, points 2 and 6). Under plain
# mpirun and under launch/mpirun-local.sh, with 2 ranks: a training set smaller than one global
# batch (data.synthetic_size=1) and a token id outside the vocabulary in the first sample, which
# every rank meets, are agreed: one line from rank 0 ending "(on every rank)", exit 1, no Open
# MPI banner (MPI_ABORT, ORTE_ERROR_LOG, orte_base_help_aggregate); a bad token that one rank
# meets while loading a batch ends every rank with that rank's line and no banner either (a plain
# exit, which mpirun turns into the end of the job). A failed start leaves no run directory it
# made, and removes nothing of a directory it did not make. A second Ctrl-C to
# mpirun-local.sh after the ranks stopped reports their 75, not mpirun's 1.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup data_errors
cfg=$src/configs/synthetic_linear.yaml
np2=("$mpiexec" "${mpi_flags[@]}" -np 2 "$bin")
export DTRAIN_BIN=$bin
local_np2=(env NP=2 DTRAIN_BIND=none bash "$src/launch/mpirun-local.sh")
banner='MPI_ABORT|ORTE_ERROR_LOG|orte_base_help_aggregate|help message'

# one_line NAME PATTERN: exit 1, exactly one error line matching PATTERN, no Open MPI banner.
one_line() {
  [[ $rc == 1 ]] || { show "$1"; fail "$1: exit $rc, expected 1"; }
  [[ $(grep -c 'error: ' "$tmp/$1.err") == 1 ]] || { show "$1"; fail "$1: not exactly one error line"; }
  grep -qE "$2" "$tmp/$1.err" || { show "$1"; fail "$1: the error does not match /$2/"; }
  ! grep -qE "$banner" "$tmp/$1.err" || { show "$1"; fail "$1: Open MPI's text leaks"; }
  echo "ok: $1: $(grep -m1 'error: ' "$tmp/$1.err" | cut -c1-140)"
}
# launcher_only NAME: under mpirun-local.sh stderr is the mpirun command, dtrain's line(s), the exit.
launcher_only() {
  grep -vE '^\+ mpirun|^\[rank [0-9]+\] error: ' "$tmp/$1.err" | diff - <(echo "mpirun-local.sh: exit $rc") >&2 ||
    { show "$1"; fail "$1: mpirun-local.sh shows more than dtrain's line and the exit code"; }
}

# 1. A training set smaller than one global batch, on every rank; the run directory it made goes.
small=(data.synthetic_size=1 run.dir="$tmp/runs/a/b" run.name=tiny)
tiny_error="^\[rank 0\] error: train\.global_batch: the training set \(1 samples\) is smaller than one global batch \(128\) \(on every rank\)$"
run 90 tiny "${np2[@]}" "$cfg" "${small[@]}"
one_line tiny "$tiny_error"
[[ ! -e $tmp/runs ]] || { find "$tmp/runs" >&2; fail "tiny: the failed start left $tmp/runs behind"; }
run 90 tiny_local "${local_np2[@]}" "$cfg" "${small[@]}"
one_line tiny_local "$tiny_error"
launcher_only tiny_local
[[ ! -e $tmp/runs ]] || { find "$tmp/runs" >&2; fail "tiny_local: the failed start left $tmp/runs behind"; }
echo "ok: no run directory left by the failed starts"

# A directory the run did not make keeps everything in it.
mkdir -p "$tmp/kept/tiny"
echo "mine" >"$tmp/kept/tiny/notes.txt"
run 90 tiny_kept "${np2[@]}" "$cfg" data.synthetic_size=1 run.dir="$tmp/kept" run.name=tiny
one_line tiny_kept "$tiny_error"
[[ $(cat "$tmp/kept/tiny/notes.txt") == mine ]] || fail "tiny_kept: another run's file was touched"
echo "ok: a directory the failed run did not make stays as it was"

# 2. Token files (Note [token windows]): tokens outside the vocabulary throughout (the first
# window, which every rank reads at start-up, holds them), and one in the middle, which a rank
# meets while loading a batch.
mkdir -p "$tmp/tok"
"${DTRAIN_REF_PYTHON:-/usr/bin/python3}" - "$tmp/tok" <<'PY'
import array, sys
out = sys.argv[1]
data = [(i * 7 + 3) % 200 for i in range(8000)]
array.array("H", [300] * 8000).tofile(open(out + "/first.bin", "wb"))
array.array("H", data[:4000] + [300] + data[4000:]).tofile(open(out + "/middle.bin", "wb"))
array.array("H", data[:2000]).tofile(open(out + "/val.bin", "wb"))
PY
gpt=("$src/configs/text_gpt.yaml" model.n_layer=1 model.n_embd=32 model.n_head=2 model.seq_len=32
  train.global_batch=16 train.max_steps=400 run.log_every=0 data.workers=0 data.format=tokens
  data.path="$tmp/tok" model.vocab_size=256 data.test_files=val.bin run.dir="''")
first_error="^\[rank 0\] error: data\.num_classes: $tmp/tok/first\.bin: token 300 at token index [0-9]+ .*vocabulary \[0, 256\).* \(on every rank\)$"
run 120 first "${np2[@]}" "${gpt[@]}" data.train_files=first.bin
one_line first "$first_error"
run 120 first_local "${local_np2[@]}" "${gpt[@]}" data.train_files=first.bin
one_line first_local "$first_error"
launcher_only first_local

middle_error="^\[rank [01]\] error: data\.num_classes: $tmp/tok/middle\.bin: token 300 at token index 4000 "
for how in plain local; do
  if [[ $how == plain ]]; then cmd=("${np2[@]}"); else cmd=("${local_np2[@]}"); fi
  run 120 "middle_$how" "${cmd[@]}" "${gpt[@]}" data.train_files=middle.bin
  [[ $rc != 0 ]] || { show "middle_$how"; fail "middle_$how: exit 0"; }
  grep -qE "$middle_error" "$tmp/middle_$how.err" || { show "middle_$how"; fail "middle_$how: no line naming the token"; }
  ! grep -qE "$banner" "$tmp/middle_$how.err" || { show "middle_$how"; fail "middle_$how: Open MPI's text leaks"; }
  [[ $how == plain ]] || launcher_only middle_local
  echo "ok: middle_$how: exit $rc: $(grep -m1 'error: ' "$tmp/middle_$how.err" | cut -c1-120)"
done

# 3. A second Ctrl-C after the ranks stopped with 75 (while mpirun winds down): the script says 75.
# SIGTERM stands for Ctrl-C (the script treats both alike; a background job ignores SIGINT).
kill_tree() {  # PID: it and its descendants
  local c
  for c in $(pgrep -P "$1" || true); do kill_tree "$c"; done
  kill -KILL "$1" 2>/dev/null || true
}
"${local_np2[@]}" "$cfg" run.dir="$tmp/runs2" run.name=stop train.epochs=1000 run.log_every=0 \
  train.eval=false checkpoint.every_epoch=false >"$tmp/stop.out" 2>"$tmp/stop.err" &
job=$!
wait_for_training "$tmp/runs2/stop"
kill -TERM "$job"
for _ in $(seq 1 1200); do
  grep -q "(exit code 75)$" "$tmp/stop.out" && break
  sleep 0.05
done
grep -q "(exit code 75)$" "$tmp/stop.out" || { kill_tree "$job"; show stop; fail "the ranks did not stop with 75 within 60 s"; }
kill -TERM "$job" 2>/dev/null || true
timeout 60 tail --pid="$job" -f /dev/null || { kill_tree "$job"; fail "mpirun-local.sh did not end within 60 s of the second Ctrl-C"; }
rc=0
wait "$job" || rc=$?
[[ $rc == 75 ]] || { show stop; fail "a second Ctrl-C after the stop: exit $rc, not the ranks' 75"; }
tail -n 1 "$tmp/stop.err" | grep -qx "mpirun-local.sh: exit 75" || { show stop; fail "the last line is not 'mpirun-local.sh: exit 75'"; }
echo "ok: a second Ctrl-C after the stop: $(grep -v '^+ mpirun' "$tmp/stop.err" | tr '\n' '|')"
echo "PASS"
