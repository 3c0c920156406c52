#!/usr/bin/env bash
# What the image recipe costs on one GPU (configs/imagenet_resnet50.yaml's augmentation, mixing,
# label smoothing and EMA; docs/TRAINING.md "The image recipe"), in one go (about 8 minutes on an
# H100 with 16 cores: DEADLINE stops it starting runs after that), ending with one table
# ($OUT/results.md): ResNet-50, batch 128, bf16, channels-last, on
#   - synthetic uint8 batches (bench/configs/resnet50.yaml), once: the GPU's own rate, which every
#     row is set against;
#   - the JPEG folder (bench/configs/resnet50_jpeg.yaml) on the first C cores of each of CORES
#     (taskset -c 0-C-1, data.workers C-1, at least 1): dtrain with data.decode gpu and no recipe,
#     with the recipe (RECIPE below), and the recipe with data.decode cpu; each a `dtrain bench`
#     of its own (WARMUP steps, then its rate over STEPS), so that one that fails leaves the
#     others' rows;
#   - PyTorch's own pipeline for the same recipe on the same cores (bench/torch_image_recipe.py:
#     ImageFolder and the reference's PIL transforms in C-1 DataLoader workers, and with gpu in
#     TORCH_DECODES torchvision.io.decode_jpeg and the transforms on the GPU), under each of
#     TORCH_MODES (torch.compile of the module returning the loss: reduce-overhead, default, none;
#     on few cores reduce-overhead's CUDA graphs leave the loader's workers more of the CPU).
# The core counts run largest first, so that torch.compile's caches (TORCHINDUCTOR_*) are filled
# with every core before a run on a few compiles (outside its timed steps either way). Runs that
# DEADLINE leaves no time for (the last: few cores, TORCH_MODES' last) are marked in the table.
#   bash bench/image_recipe.sh                  # after bash launch/gpu.sh build
#   DRY_RUN=1 bash bench/image_recipe.sh        # the commands only
# Environment: OUT (default ./gpu-out/recipe: logs, rows.tsv, the dtrain bench tables, results.md),
# JPEG_DIR (default /tmp/dtrain-jpeg, written by bench/make_jpeg_folder.py --images 4000 when
# absent), CORES (default 3,16), STEPS (timed steps per dtrain run, default 100: at 5,000 images/s
# 30 steps time 0.8 s, and two calls' ratios to the synthetic rate spread 83-95%), TORCH_STEPS
# (per PyTorch run, default 30: its 3-core CPU rows run at about 300 images/s), WARMUP (default 10),
# TORCH_MODES (default reduce-overhead,default), TORCH_DECODES (default cpu,gpu), DEADLINE
# (seconds, default 480), RUN_TIMEOUT (seconds for one run, default 240), PYTHON, DTRAIN_BIN, EXTRA
# (overrides for every dtrain run), TORCH_ARGS (arguments for every bench/torch_image_recipe.py
# run), DRY_RUN. A smoke test on a CPU machine: DTRAIN_BIN=build/bin/dtrain CORES=2 STEPS=2 TORCH_STEPS=2
# WARMUP=1 TORCH_MODES=none EXTRA="model.name=resnet18 train.global_batch=8 data.image_size=64
# data.synthetic_shape=3,64,64 train.precision=fp32" TORCH_ARGS="--device cpu --batch 8 --size 64
# --arch resnet18" JPEG_DIR=<a folder of bench/make_jpeg_folder.py --images 64 --classes 8> (the
# data.decode gpu rows fail there: no CUDA).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out/recipe}
PY=${PYTHON:-python3}
BIN=${DTRAIN_BIN:-build-gpu/bin/dtrain}
JPEG=${JPEG_DIR:-/tmp/dtrain-jpeg}
CORES=${CORES:-3,16}
STEPS=${STEPS:-100}
TORCH_STEPS=${TORCH_STEPS:-30}
WARMUP=${WARMUP:-10}
TORCH_MODES=${TORCH_MODES:-reduce-overhead,default}
TORCH_DECODES=${TORCH_DECODES:-cpu,gpu}
DEADLINE=${DEADLINE:-480}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
DRY_RUN=${DRY_RUN:-}
read -ra EXTRA_ARGS <<<"${EXTRA:-}"
read -ra TORCH_EXTRA <<<"${TORCH_ARGS:-}"
# The recipe's keys as configs/imagenet_resnet50.yaml sets them (torchvision's --auto-augment ta_wide
# --random-erase 0.1 --label-smoothing 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0 --model-ema
# --model-ema-decay 0.99998 --model-ema-steps 32).
RECIPE=(data.auto_augment=trivial_augment_wide data.random_erase=0.1 train.label_smoothing=0.1
  train.mixup_alpha=0.2 train.cutmix_alpha=1.0 train.ema_decay=0.99998 train.ema_every=32)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
# torch.compile's on-disk caches, so that the second compile of the same step is mostly read back.
export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
[ -d /opt/dtrain-deps/usr/lib/x86_64-linux-gnu ] &&
  export LD_LIBRARY_PATH=/opt/dtrain-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -z "$DRY_RUN" ]; then
  [ -x "$BIN" ] || { echo "no $BIN: run bash launch/gpu.sh build first"; exit 1; }
  mkdir -p "$OUT"
  [ -d "$JPEG/train" ] || $PY bench/make_jpeg_folder.py "$JPEG" --images 4000 || exit 1
  LOG=$OUT/image_recipe.log
  ROWS=$OUT/rows.tsv
  : >"$LOG"
  : >"$ROWS"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$LOG"
else
  LOG=/dev/null
  ROWS=/dev/null
fi

# NAME CMD...: CMD under timeout (RUN_TIMEOUT, or what is left of DEADLINE), its output in
# $OUT/NAME.log; with DRY_RUN the command is printed instead. Returns CMD's exit status (124: timed
# out), or 125 when too little of DEADLINE is left to start it.
go() {
  local name=$1 limit=$RUN_TIMEOUT left
  shift
  echo "== $name: $(printf '%q ' "$@")" | tee -a "$LOG"
  [ -n "$DRY_RUN" ] && return 0
  left=$((DEADLINE - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 30 ]; then
    echo "$name: not run ($SECONDS s gone of DEADLINE $DEADLINE)" | tee -a "$LOG" >"$OUT/$name.log"
    return 125
  fi
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "$name: exit $rc" | tee -a "$LOG"; tail -4 "$OUT/$name.log" | tee -a "$LOG"; }
  return $rc
}

# A row of rows.tsv: setting, cores, workers, images/s (- when none), note.
row() { [ -n "$DRY_RUN" ] || printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$ROWS"; }

# NAME SETTING CORES WRAP...: a dtrain bench of one setting (bench's own arguments after WRAP),
# its rate and data wait from $OUT/NAME.json.
dtrain_bench() {
  local name=$1 setting=$2 cores=$3
  shift 3
  go "$name" "$@" "${EXTRA_ARGS[@]}" --warmup-steps "$WARMUP" --steps "$STEPS" --out "$OUT/$name" --force
  local rc=$?
  [ -n "$DRY_RUN" ] && return
  local fields
  fields=$($PY - "$OUT/$name.json" "$rc" <<'EOF'
import json, os, sys
path, rc = sys.argv[1], sys.argv[2]
if not os.path.exists(path):
    why = {"124": "timed out", "125": "not run (DEADLINE)"}.get(rc, f"failed (exit {rc})")
    print(f"-\t-\t{why}, no table")
    sys.exit()
rows = json.load(open(path))["rows"]
r = max(rows, key=lambda r: r.get("samples_per_s") or 0) if rows else {}
if not r.get("fits"):
    print(f"{r.get('workers', '-')}\t-\t{r.get('note') or 'failed'} (exit {rc})")
else:
    wait = r.get("data_wait_share")
    note = f"data wait {100 * wait:.1f}%" if wait is not None else ""
    print(f"{r['workers']}\t{r['samples_per_s']:.1f}\t{note}")
EOF
)
  IFS=$'\t' read -r workers rate note <<<"$fields"
  row "$setting" "$cores" "$workers" "$rate" "$note"
}

# NAME SETTING CORES WRAP...: bench/torch_image_recipe.py, its rate from its JSON line.
torch_run() {
  local name=$1 setting=$2 cores=$3
  shift 3
  go "$name" "$@" "${TORCH_EXTRA[@]}"
  local rc=$?
  [ -n "$DRY_RUN" ] && return
  local fields
  fields=$($PY - "$OUT/$name.log" "$rc" <<'EOF'
import json, os, sys
path, rc = sys.argv[1], sys.argv[2]
lines = [l for l in open(path, errors="replace") if l.startswith("{")] if os.path.exists(path) else []
try:
    r = json.loads(lines[-1])
except (IndexError, ValueError):
    why = {"124": "timed out", "125": "not run (DEADLINE)"}.get(rc, f"failed (exit {rc})")
    print(f"-\t-\t{why}")
    sys.exit()
print(f"{r['workers']}\t{r['images_per_s']:.1f}\t{r['mode']}, transforms {r['transforms']}, mix {r['mix']}, "
      f"{r['optimizer']}, warm-up {r['warmup_s']} s")
EOF
)
  IFS=$'\t' read -r workers rate note <<<"$fields"
  row "$setting" "$cores" "$workers" "$rate" "$note"
}

dtrain_bench synthetic "dtrain, synthetic uint8" all "$BIN" bench bench/configs/resnet50.yaml
for c in $(tr , '\n' <<<"$CORES" | sort -rn); do
  w=$((c > 1 ? c - 1 : 1))
  pin=(taskset -c 0-$((c - 1)))
  jpeg=("${pin[@]}" "$BIN" bench bench/configs/resnet50_jpeg.yaml data.path="$JPEG")
  dtrain_bench "gpu_plain_c$c" "dtrain, decode gpu, no recipe" "$c" "${jpeg[@]}" --workers "$w" --decode gpu
  dtrain_bench "gpu_recipe_c$c" "dtrain, decode gpu, recipe" "$c" "${jpeg[@]}" "${RECIPE[@]}" --workers "$w" --decode gpu
  dtrain_bench "cpu_recipe_c$c" "dtrain, decode cpu, recipe" "$c" "${jpeg[@]}" "${RECIPE[@]}" --workers "$w" --decode cpu
  for mode in ${TORCH_MODES//,/ }; do
    for d in ${TORCH_DECODES//,/ }; do
      torch_run "torch_${d}_${mode}_c$c" "PyTorch, decode $d, recipe" "$c" "${pin[@]}" "$PY" bench/torch_image_recipe.py \
        --data "$JPEG" --decode "$d" --compile "$mode" --workers "$w" --warmup "$WARMUP" --steps "$TORCH_STEPS"
    done
  done
done
[ -n "$DRY_RUN" ] && exit 0

# The table: every row against the synthetic rate.
$PY - "$ROWS" <<'EOF' | tee "$OUT/results.md"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
synthetic = next((float(r[3]) for r in rows if r[1] == "all" and r[3] not in ("", "-")), 0.0)
print(f"\nResNet-50, batch 128, bf16, channels-last; the image recipe: TrivialAugmentWide, RandomErasing 0.1, "
      f"label smoothing 0.1, MixUp 0.2 / CutMix 1.0, EMA every 32 steps\n")
print("| setting | cores | workers | images/s | of synthetic | note |")
print("| --- | --- | --- | --- | --- | --- |")
for setting, cores, workers, rate, note in [(r + [""] * 5)[:5] for r in rows]:
    try:
        share = f"{100 * float(rate) / synthetic:.1f}%" if synthetic else ""
        rate_text = f"{float(rate):,.0f}"
    except ValueError:
        share, rate_text = "", "-"
    print(f"| {setting} | {cores} | {workers} | {rate_text} | {share} | {note} |")
EOF
