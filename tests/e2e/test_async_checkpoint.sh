#!/usr/bin/env bash
# e2e: checkpoints written in the background (checkpoint.async, Note [background saves]).
#   - 2 ranks saving every 25 steps in the background write the same files as synchronous saves
#     (model.pt and the ranks' files byte for byte, state.pt's model and optimizer state equal);
#     a run resumed from a background-written checkpoint ends as one resumed from a synchronous
#     one, bit for bit; sharded (dist.shard_optimizer), each rank writes its shard of the optimizer
#     state into its own file, and the run resumed from them ends as the unsharded one;
#   - kill -9 of a rank while a (slowed: checkpoint.write_mb_per_s) background write is in flight:
#     the job ends, the step being written has no marker, the run resumes from the previous
#     complete checkpoint and ends as an uninterrupted run;
#   - a full disk under the background write (its temporary file a link to /dev/full): every rank
#     stops with the error naming the rank and the file, and no marker is written.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS,
# DTRAIN_REF_PYTHON).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup async_checkpoint
e2e_torch_python

cfg=$src/configs/synthetic_linear.yaml
# 128 steps per epoch, a constant learning rate.
common=(run.dir="$tmp/runs" run.log_every=20 data.workers=0 run.timeout_s=60 train.eval=false
        checkpoint.keep=100)
ckpt() { printf '%s/runs/%s/checkpoints/step-%09d' "$tmp" "$1" "$2"; }
np2=("$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" "${common[@]}")

# ---- the same files, and the same resumed run ---------------------------------------------------
for mode in on off; do
  run 120 "first-$mode" "${np2[@]}" run.name="$mode" checkpoint.async=$mode checkpoint.every_steps=25 train.epochs=1
  [[ $rc == 0 ]] || { show "first-$mode"; fail "async=$mode: the first epoch failed (exit $rc)"; }
done
grep -q "written in the background" "$tmp/first-on.out" || { show first-on; fail "async=on: no background write in the log"; }
! grep -q "written in the background" "$tmp/first-off.out" || fail "async=off: a background write"
for step in 25 50 75 100 125 128; do
  a=$(ckpt on $step) b=$(ckpt off $step)
  [[ -f $a/COMPLETE && -f $b/COMPLETE ]] || fail "step $step: a checkpoint is not complete ($a, $b)"
  for f in model.pt rank-00000.pt rank-00001.pt preprocess.json; do
    cmp -s "$a/$f" "$b/$f" || fail "step $step: $f differs between background and synchronous saves"
  done
  same_model "$a" "$b" >/dev/null
done
echo "background and synchronous saves: the same files at 6 steps"
for mode in on off; do
  run 120 "resume-$mode" "${np2[@]}" run.name="$mode" checkpoint.async=$mode train.epochs=2
  [[ $rc == 0 ]] || { show "resume-$mode"; fail "async=$mode: resuming failed (exit $rc)"; }
  grep -q "resumed from $(ckpt $mode 128) at step 128" "$tmp/resume-$mode.out" ||
    { show "resume-$mode"; fail "async=$mode: did not resume at step 128"; }
done
same_model "$(ckpt on 256)" "$(ckpt off 256)"
cmp -s "$tmp/runs/on/model.pt" "$tmp/runs/off/model.pt" || fail "the resumed runs' model.pt differ"
echo "resumed from a background-written checkpoint = resumed from a synchronous one"

# Sharded (dist.shard_optimizer): each rank writes its shard of the optimizer state into its own
# file in the background; resumed, the run ends as the unsharded ones (two ranks: the same bits).
run 120 first-sharded "${np2[@]}" run.name=sharded checkpoint.async=on dist.shard_optimizer=true \
  checkpoint.every_steps=25 train.epochs=1
[[ $rc == 0 ]] || { show first-sharded; fail "sharded: the first epoch failed (exit $rc)"; }
"$py" - "$(ckpt sharded 128)" <<'PY' || fail "sharded: the rank files do not hold the shards"
import sys, torch
d = sys.argv[1]
s = torch.load(d + "/state.pt", weights_only=False)
assert s["optimizer_shards"] == 2 and len(s["optimizer"]) == 0, (s.get("optimizer_shards"), len(s["optimizer"]))
for r in range(2):
    assert len(torch.load(f"{d}/rank-{r:05d}.pt", weights_only=False)["optimizer_shard"]) > 0, r
PY
cmp -s "$(ckpt sharded 128)/model.pt" "$(ckpt on 128)/model.pt" || fail "sharded: model.pt at step 128 differs"
run 120 resume-sharded "${np2[@]}" run.name=sharded checkpoint.async=on dist.shard_optimizer=true train.epochs=2
[[ $rc == 0 ]] || { show resume-sharded; fail "sharded: resuming failed (exit $rc)"; }
cmp -s "$tmp/runs/sharded/model.pt" "$tmp/runs/on/model.pt" || fail "sharded: the resumed run's model.pt differs"
echo "sharded: each rank wrote its shard in the background; resumed = unsharded, bit for bit"

# ---- kill -9 while a background write is in flight ----------------------------------------------
# 0.002 MB/s: each file of a few kB takes about a second to write, so the write of step 50 is
# still in flight when the kill comes.
slow=(checkpoint.async=on checkpoint.every_steps=25 checkpoint.write_mb_per_s=0.002)
name=killed
start=$(date +%s)
timeout -k 10 120 "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" "${common[@]}" run.name=$name \
  "${slow[@]}" train.epochs=300 >"$tmp/$name.out" 2>"$tmp/$name.err" &
job=$!
for _ in $(seq 1 600); do
  [[ -f $(ckpt $name 25)/COMPLETE && -d $(ckpt $name 50) ]] && break
  sleep 0.1
done
[[ -d $(ckpt $name 50) && ! -f $(ckpt $name 50)/COMPLETE ]] ||
  { show $name; fail "$name: no background write of step 50 in flight to kill"; }
mapfile -t pids < <(pgrep -f "run.name=$name" | while read -r p; do [[ $(cat /proc/$p/comm 2>/dev/null) == dtrain ]] && echo "$p"; done)
kill -9 "${pids[1]}"
rc=0
wait "$job" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc != 0 && $rc != 124 ]] || { show $name; fail "$name: exit $rc after kill -9 of a rank"; }
[[ ! -f $(ckpt $name 50)/COMPLETE ]] || fail "$name: the write the kill interrupted has a marker"
newest=$(ls -d "$tmp/runs/$name/checkpoints"/step-*/COMPLETE | sort | tail -1)
[[ $newest == $(ckpt $name 25)/COMPLETE ]] || fail "$name: the newest complete checkpoint is $newest, not step 25's"
run 120 killed-resume "${np2[@]}" run.name=$name checkpoint.async=on checkpoint.every_steps=25 train.epochs=1
[[ $rc == 0 ]] || { show killed-resume; fail "$name: resuming after the kill failed (exit $rc)"; }
grep -q "resumed from $(ckpt $name 25) at step 25" "$tmp/killed-resume.out" ||
  { show killed-resume; fail "$name: did not resume from step 25"; }
same_model "$(ckpt $name 128)" "$(ckpt on 128)"
echo "$name: ended ${elapsed} s after kill -9 during a background write; resumed from step 25 = uninterrupted"

# ---- a full disk under the background write -----------------------------------------------------
name=full
timeout -k 10 120 "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$cfg" "${common[@]}" run.name=$name \
  "${slow[@]}" train.epochs=300 >"$tmp/$name.out" 2>"$tmp/$name.err" &
job=$!
for _ in $(seq 1 600); do [[ -d $(ckpt $name 25) ]] && break; sleep 0.05; done
ln -s /dev/full "$(ckpt $name 25)/model.pt.tmp"
rc=0
wait "$job" || rc=$?
[[ $rc != 0 && $rc != 124 ]] || { show $name; fail "$name: exit $rc with a full disk under the write"; }
grep -q "checkpoint write failed on rank 0: .*$(ckpt $name 25)/model.pt.tmp.*No space left on device" "$tmp/$name.err" ||
  { show $name; fail "$name: the error does not name the rank, the file and the reason"; }
[[ ! -f $(ckpt $name 25)/COMPLETE ]] || fail "$name: a marker for a checkpoint whose write failed"
[[ ! -d $(ckpt $name 50) ]] || fail "$name: training went on to the next save past the failed write"
echo "$name: a full disk under the background write stopped every rank, naming the file"
