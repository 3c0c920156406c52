#!/usr/bin/env bash
# What a checkpoint save costs training, synchronous against background (checkpoint.async): GPT-2
# 124M (bench/configs/gpt2.yaml, bf16, B=16, T=1024; state.pt 1.49 GB + model.pt 0.50 GB) and
# ResNet-50 (bench/configs/resnet50.yaml), each without checkpoints, saving every EVERY steps
# synchronously, and in the background; every step logged (run.log_every=1) and the stall per
# save read by bench/checkpoint_stall.py (results.md).
#   bash bench/checkpoint_stall.sh            # after bash launch/gpu.sh build (about 5 minutes)
# A background write of GPT-2's 2 GB takes about 7 s on the H100 machine: saves closer together
# than that wait for the one before (the log says so), and the stall is that wait, not the save's.
# Environment: OUT (default ./gpu-out/checkpoint), DTRAIN_BIN, PYTHON, EVERY (250), STEPS (800),
# CASES (gpt2 resnet50; also gpt2x4, whose 4 ranks on one GPU step once a second: its own
# X4_STEPS (40) and X4_EVERY (15), so that its five runs fit a device call), EXTRA (overrides for
# every run; on a CPU: DTRAIN_BIN=build/bin/dtrain
# EXTRA="model.n_layer=2 data.synthetic_shape=128 ..." CASES=gpt2).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out/checkpoint}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BIN=${DTRAIN_BIN:-build-gpu/bin/dtrain}
EVERY=${EVERY:-250}
STEPS=${STEPS:-800}
read -ra EXTRA_ARGS <<<"${EXTRA:-}"
[ -x "$BIN" ] || { echo "no $BIN: run bash launch/gpu.sh build first"; exit 1; }
: >"$OUT/results.md"
for c in ${CASES:-gpt2 resnet50}; do
  runs=()
  # gpt2x4: GPT-2 on 4 NCCL ranks sharing the GPU (16 samples each) with the optimizer sharded
  # (dist.shard_optimizer: every rank writes its own shard, all at once), against the same 4
  # ranks unsharded (rank 0 writes the whole state: *_whole).
  config=$c launch=() modes="none off on" extra=() steps=$STEPS case_every=$EVERY
  if [ "$c" = gpt2x4 ]; then
    config=gpt2 modes="none off on off_whole on_whole"
    launch=(mpirun --oversubscribe -np 4)
    extra=(train.global_batch=64)
    steps=${X4_STEPS:-40} case_every=${X4_EVERY:-15}
  fi
  for mode in $modes; do
    every=$case_every
    [ $mode = none ] && every=0
    shard=()
    [ "$c" = gpt2x4 ] && shard=(dist.shard_optimizer=$([[ $mode = *_whole ]] && echo false || echo true))
    name=${c}_$mode
    rm -rf "$OUT/runs/$name"
    timeout 300 "${launch[@]}" "$BIN" "bench/configs/$config.yaml" run.dir="$OUT/runs" run.name="$name" \
      run.log_every=1 train.max_steps="$steps" train.epochs=1000 checkpoint.every_epoch=false \
      checkpoint.every_steps=$every checkpoint.async=$(m=${mode%_whole}; echo ${m/none/off}) \
      checkpoint.keep=1 "${extra[@]}" "${shard[@]}" "${EXTRA_ARGS[@]}" >"$OUT/$name.log" 2>&1 ||
      echo "$name: exit $?" | tee -a "$OUT/results.md"
    grep -E "checkpoint saved|waited|page-locked" "$OUT/$name.log" | tail -3
    runs+=("$OUT/runs/$name/metrics.jsonl")
  done
  echo "### $c, a save every $case_every steps" | tee -a "$OUT/results.md"
  $PY bench/checkpoint_stall.py --every "$case_every" "${runs[@]}" | tee -a "$OUT/results.md"
  rm -rf "$OUT"/runs/*/checkpoints
done
