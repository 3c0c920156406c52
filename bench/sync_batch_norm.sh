#!/usr/bin/env bash
# BatchNorm on N ranks on one GPU (Note [BatchNorm on N ranks]), side by side in one go: ResNet-50
# (bench/configs/resnet50.yaml: bf16, channels-last, batch 128 per rank) on 1 rank and on 2 and 4
# NCCL ranks sharing the GPU (Note [ranks sharing a GPU]: NCCL over loopback sockets), with each
# rank's own BatchNorm statistics and with model.sync_batch_norm, against PyTorch DDP
# (bench/torch_ddp_resnet.py) with BatchNorm and with nn.SyncBatchNorm on the same ranks and the
# same NCCL settings. dtrain's rate is its last progress line (after the graph capture and 24 or
# more steps), PyTorch's the mean of 20 timed steps after 8 of warm-up; both count every rank's
# images. Ends with one table (results.md).
#   bash bench/sync_batch_norm.sh              # after bash launch/gpu.sh build (about 6 minutes)
#   bash bench/sync_batch_norm.sh compile      # instead: PyTorch DDP under torch.compile (default
#                                              # mode, then reduce-overhead), SyncBatchNorm and not,
#                                              # on RANKS (the compile takes a minute or more each)
# Environment: OUT (default ./gpu-out/syncbn), RANKS (default 1,2,4), PYTHON, DTRAIN_BIN, EXTRA
# (overrides for every dtrain run; a smoke test on a CPU machine: DTRAIN_BIN=build/bin/dtrain
# EXTRA="model.name=resnet18 data.synthetic_shape=3,32,32" TORCH_ARGS="--device cpu --arch
# resnet18 --size 32 --batch 8 --warmup 1 --steps 2" RANKS=1,2 BATCH=8).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out/syncbn}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BIN=${DTRAIN_BIN:-build-gpu/bin/dtrain}
RANKS=${RANKS:-1,2,4}
BATCH=${BATCH:-128}
read -ra EXTRA_ARGS <<<"${EXTRA:-}"
read -ra TORCH_ARGS <<<"${TORCH_ARGS:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_NVLS_ENABLE=0
[ -x "$BIN" ] || { echo "no $BIN: run bash launch/gpu.sh build first"; exit 1; }
MODE=${1:-speed}
case $MODE in speed | compile) ;; *) echo "usage: $0 [compile]"; exit 2 ;; esac
LOG=$OUT/$MODE.log
: >"$LOG"
ROWS=$OUT/rows_$MODE.txt
: >"$ROWS"

# The last progress line's samples/s of a dtrain log.
last_rate() { grep -E "samples/s" "$1" | grep -v "^done" | tail -1 | sed -E 's/.* ([0-9.]+) samples\/s.*/\1/'; }
# A JSON field of PyTorch's line.
field() { grep -E '^\{' "$1" | tail -1 | $PY -c "import json,sys; print(json.load(sys.stdin).get('$2', ''))" 2>/dev/null; }

dtrain_run() {  # NP SYNC
  local np=$1 sync=$2 name=dtrain_np$1_sync$2
  local size=$((BATCH * np * 12))
  echo "== $name" | tee -a "$LOG"
  timeout 300 mpirun --oversubscribe -np "$np" "$BIN" bench/configs/resnet50.yaml run.dir="$OUT/runs" \
    run.name="$name" train.global_batch=$((BATCH * np)) data.synthetic_size=$size \
    model.sync_batch_norm="$sync" "${EXTRA_ARGS[@]}" >"$OUT/$name.log" 2>&1
  local rc=$? rate
  rate=$(last_rate "$OUT/$name.log")
  grep -E "BatchNorm|sync_batch_norm|CUDA graph|error" "$OUT/$name.log" | head -5 | tee -a "$LOG"
  tail -2 "$OUT/$name.log" | tee -a "$LOG"
  echo "dtrain $np $sync ${rate:-?} rc=$rc" | tee -a "$LOG" >>"$ROWS"
}

torch_run() {  # NP SYNC [torch_ddp_resnet.py's arguments]
  local np=$1 sync=$2
  shift 2
  local name=torch_np${np}_sync${sync}${1:+_$(echo "$*" | tr -c 'a-z0-9' '_')}
  local flags=()
  [ "$sync" = true ] && flags+=(--sync-bn)
  echo "== $name" | tee -a "$LOG"
  timeout 420 mpirun --oversubscribe -np "$np" "$PY" bench/torch_ddp_resnet.py --batch "$BATCH" \
    "${flags[@]}" "$@" "${TORCH_ARGS[@]}" >"$OUT/$name.log" 2>&1
  local rc=$?
  grep -E '^\{' "$OUT/$name.log" | tail -1 | tee -a "$LOG"
  [ $rc -eq 0 ] || tail -5 "$OUT/$name.log" | tee -a "$LOG"
  local rate
  rate=$(field "$OUT/$name.log" images_per_s)
  echo "torch$([ $# -gt 0 ] && echo "($*)" | tr ' ' '_') $np $sync ${rate:--} rc=$rc" >>"$ROWS"
}

IFS=, read -ra NPS <<<"$RANKS"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$LOG"
if [ "$MODE" = speed ]; then
  for np in "${NPS[@]}"; do
    syncs="false true"
    [ "$np" = 1 ] && syncs=false  # one rank: its batch is the global batch
    for s in $syncs; do dtrain_run "$np" "$s"; done
    for s in $syncs; do torch_run "$np" "$s"; done
  done
else
  for np in "${NPS[@]}"; do
    for s in false true; do
      [ "$np" = 1 ] && [ "$s" = true ] && continue
      torch_run "$np" "$s" --compile
      torch_run "$np" "$s" --compile --mode reduce-overhead
    done
  done
fi

# The table: images/s over every rank, and each rate against the same framework's 1 rank.
$PY - "$ROWS" "$BATCH" <<'PY' | tee "$OUT/results_$MODE.md"
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print(f"| who | ranks | BatchNorm | images/s (all ranks) | per rank | ms/step |")
print("| --- | --- | --- | --- | --- | --- |")
batch = int(sys.argv[2])
for who, np, sync, rate, rc in rows:
    bn = "SyncBatchNorm" if sync == "true" else "each rank's own"
    try:
        r = float(rate)
        print(f"| {who} | {np} | {bn} | {r:,.0f} | {r / int(np):,.0f} | {1e3 * batch * int(np) / r:.1f} |")
    except ValueError:
        print(f"| {who} | {np} | {bn} | failed ({rc}) | | |")
PY
