#!/usr/bin/env bash
# data.decode gpu against cpu on one GPU (Note [GPU decoding]), in one go (about 7 minutes on an
# H100 with 16 cores), ending with one table:
#   - ResNet-50 (bench/configs/resnet50_jpeg.yaml) from two JPEG folders (140 kilopixels, and
#     ImageNet's 500x375) on 1, 2, 3 and 16 cores (taskset -c 0-C-1, data.workers C-1, at least 1)
#     with each decoder, against the synthetic uint8 rate (bench/configs/resnet50.yaml): the goal
#     is >= 95% of it on 3 cores with gpu;
#   - a training run with data.decode auto on 3 cores and one with gpu on 16: what the log says
#     of the decoder, and the end-of-run diagnosis of a run at the GPU's pace;
#   - with SWEEP=1, a data.workers sweep (WORKERS) with both decoders on every core;
#   - the decode rate alone: dtrain's GPU decoder and its CPU path, one thread each
#     (GpuDecode.Throughput in the gpu tier), and torchvision.io.decode_jpeg(device="cuda") on
#     the same files (batches of 128) where torchvision is installed.
#   bash bench/gpu_decode.sh                # after bash launch/gpu.sh build
#   bash bench/gpu_decode.sh accuracy       # instead: configs/imagefolder_resnet.yaml on Fashion-
#                                           # MNIST JPEGs with each decoder (about 3 minutes, a
#                                           # device call of its own): the same accuracy
#   bash bench/gpu_decode.sh profile        # instead: 8 profiled steps of decode gpu on 3 cores
#                                           # and of synthetic batches, compared kernel by kernel
#                                           # (bench/trace_summary.py; about 1 minute)
# Environment: OUT (default ./gpu-out/decode: logs and tables only), JPEG_DIR and JPEG_500_DIR
# (default /tmp/dtrain-jpeg and /tmp/dtrain-jpeg-500, written by bench/make_jpeg_folder.py when
# absent), CORES (default 1,2,3,16), DECODERS (default gpu,cpu); the Fashion-MNIST JPEGs and
# the accuracy runs' folders go under /tmp too, as they hold thousands of files and weights),
# DTRAIN_FASHION_MNIST, PYTHON, STEPS (timed steps per setting, default 100: 40 time about 1 s at 5,000 images/s), WARMUP (default 10), WORKERS (the sweep's, default 1,2,4,8,15), EXTRA
# (overrides for every run: a smoke test of this script on a CPU machine with DTRAIN_BIN=build/bin/
# dtrain EXTRA="model.name=resnet18 train.global_batch=16" STEPS=2 WARMUP=1 WORKERS=1,2).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out/decode}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BIN=${DTRAIN_BIN:-build-gpu/bin/dtrain}
TESTS=build-gpu/tests/dtrain_gpu_tests
JPEG=${JPEG_DIR:-/tmp/dtrain-jpeg}
JPEG_500=${JPEG_500_DIR:-/tmp/dtrain-jpeg-500}
CORES=${CORES:-1,2,3,16}
SWEEP=${SWEEP:-}
DECODERS=${DECODERS:-gpu,cpu}
SCRATCH=${SCRATCH:-/tmp/dtrain-decode}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-10}
WORKERS=${WORKERS:-1,2,4,8,15}
read -ra EXTRA_ARGS <<<"${EXTRA:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
[ -d /opt/dtrain-deps/usr/lib/x86_64-linux-gnu ] &&
  export LD_LIBRARY_PATH=/opt/dtrain-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x "$BIN" ] || { echo "no $BIN: run bash launch/gpu.sh build first"; exit 1; }
LOG=$OUT/gpu_decode.log
MODE=${1:-speed}
case $MODE in speed | accuracy | profile) ;; *) echo "usage: $0 [accuracy | profile]"; exit 2 ;; esac

if [ "$MODE" = speed ]; then
[ -d "$JPEG/train" ] || $PY bench/make_jpeg_folder.py "$JPEG" --images 4000 || exit 1
[ -d "$JPEG_500/train" ] || $PY bench/make_jpeg_folder.py "$JPEG_500" --images 4000 --size 500x375 || exit 1
: >"$LOG"

# One dtrain bench sweep: NAME, then dtrain bench's arguments.
sweep() {
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$LOG"
  "$@" "${EXTRA_ARGS[@]}" --warmup-steps "$WARMUP" --steps "$STEPS" --out "$OUT/$name" --force >>"$LOG" 2>&1 ||
    echo "$name: exit $?" | tee -a "$LOG"
}
sweep synthetic "$BIN" bench bench/configs/resnet50.yaml --workers 2,4,8  # the fastest: the GPU's own rate
# Each folder on the first C cores (taskset), C - 1 loader threads (at least 1), both decoders.
for folder in small:$JPEG 500x375:$JPEG_500; do
  for c in ${CORES//,/ }; do
    sweep "${folder%%:*}_c$c" taskset -c 0-$((c - 1)) "$BIN" bench bench/configs/resnet50_jpeg.yaml \
      data.path="${folder#*:}" --decode "$DECODERS" --workers $((c > 1 ? c - 1 : 1))
  done
done
[ -n "$SWEEP" ] && sweep sweep "$BIN" bench bench/configs/resnet50_jpeg.yaml data.path="$JPEG" --decode "$DECODERS" --workers "$WORKERS"
grep -E "decoded on the|instead of the GPU|nvJPEG" "$LOG" | sort | uniq -c | head -5

# data.decode auto on 3 cores, and the end-of-run diagnosis of a run at the GPU's pace (16 cores,
# gpu): what the log says about the decoder and whether it calls the run data-bound.
for run in auto_c3:"taskset -c 0-2":auto:2 gpu_c16::gpu:15; do
  IFS=: read -r name wrap decode workers <<<"$run"
  echo "== $name" | tee -a "$LOG"
  rm -rf "$SCRATCH/runs/$name"
  $wrap "$BIN" bench/configs/resnet50_jpeg.yaml data.path="$JPEG" data.decode=$decode data.workers=$workers \
    train.max_steps=$((WARMUP + STEPS + 40)) run.log_every=20 run.dir="$SCRATCH/runs" run.name=$name "${EXTRA_ARGS[@]}" \
    >"$OUT/$name.log" 2>&1 || echo "$name: exit $?" | tee -a "$LOG"
  grep -E -i "decod|nvjpeg|data-bound|compute-bound|diagnosis|samples/s" "$OUT/$name.log" | tail -12 | tee -a "$LOG"
done

echo "== decode alone (GpuDecode.Throughput)" | tee -a "$LOG"
DTRAIN_DECODE_BENCH_DIR="$JPEG" "$TESTS" --gtest_filter=GpuDecode.Throughput 2>&1 | tee "$OUT/throughput.log" |
  grep -E "images/s|FAILED" | tee -a "$LOG"
$PY - "$JPEG" >"$OUT/torchvision.log" 2>&1 <<'EOF'
import glob, sys, time
try:
    import torch, torchvision
    from torchvision.io import decode_jpeg, read_file
except Exception as e:  # noqa: BLE001
    print(f"torchvision.io.decode_jpeg(device='cuda'): not measured ({e})")
    sys.exit(0)
files = sorted(glob.glob(sys.argv[1] + "/train/*/*.jpg"))[:2048]
data = [read_file(f) for f in files]
def run():
    for i in range(0, len(data), 128):
        decode_jpeg(data[i:i + 128], device="cuda")
    torch.cuda.synchronize()
run()
t = time.perf_counter()
run()
s = time.perf_counter() - t
print(f"torchvision {torchvision.__version__} decode_jpeg(device='cuda'), batches of 128, decode only: "
      f"{len(data) / s:.0f} images/s ({len(data)} images)")
EOF
tee -a "$LOG" <"$OUT/torchvision.log"
fi

if [ "$MODE" = accuracy ]; then
  FMNIST=${DTRAIN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  [ -d "$SCRATCH/fashion-jpeg/train" ] || $PY bench/make_jpeg_folder.py "$SCRATCH/fashion-jpeg" --fashion "$FMNIST"
  for d in gpu cpu; do
    echo "== accuracy_$d" | tee -a "$LOG"
    rm -rf "$SCRATCH/runs/accuracy_$d"
    "$BIN" configs/imagefolder_resnet.yaml data.path="$SCRATCH/fashion-jpeg" data.image_size=64 train.epochs=5 \
      train.warmup_steps=200 data.workers=15 data.decode=$d run.dir="$SCRATCH/runs" run.name=accuracy_$d "${EXTRA_ARGS[@]}" \
      >"$OUT/accuracy_$d.log" 2>&1 || echo "accuracy_$d: exit $?" | tee -a "$LOG"
    grep -E "test accuracy|accuracy [0-9]|decoded on the" "$OUT/accuracy_$d.log" | tail -3 | tee -a "$LOG"
  done
fi

# Where the GPU's time goes with decode gpu on 3 cores against synthetic batches: 8 profiled
# steps of each (run.profile_steps), compared kernel by kernel (bench/trace_summary.py).
if [ "$MODE" = profile ]; then
  [ -d "$JPEG/train" ] || $PY bench/make_jpeg_folder.py "$JPEG" --images 4000 || exit 1
  P=(train.max_steps=45 run.profile_steps=8 run.profile_start=30 run.log_every=15 run.dir="$SCRATCH/runs")
  rm -rf "$SCRATCH/runs/profile_synthetic" "$SCRATCH/runs/profile_gpu3"
  "$BIN" bench/configs/resnet50.yaml data.workers=8 run.name=profile_synthetic "${P[@]}" "${EXTRA_ARGS[@]}" \
    >"$OUT/profile_synthetic.log" 2>&1 || echo "profile_synthetic: exit $?" | tee -a "$LOG"
  taskset -c 0-2 "$BIN" bench/configs/resnet50_jpeg.yaml data.path="$JPEG" data.decode="${DECODE:-gpu}" data.workers=2 \
    run.name=profile_gpu3 "${P[@]}" "${EXTRA_ARGS[@]}" >"$OUT/profile_gpu3.log" 2>&1 ||
    echo "profile_gpu3: exit $?" | tee -a "$LOG"
  traces=()
  for r in gpu3 synthetic; do
    t=$SCRATCH/runs/profile_$r/trace.rank0.json
    if [ -s "$t" ]; then gzip -c "$t" >"$OUT/profile_$r.trace.json.gz" && traces+=("$OUT/profile_$r.trace.json.gz")
    else echo "profile_$r: no trace (its log: $OUT/profile_$r.log)" | tee -a "$LOG"; fi
  done
  if [ ${#traces[@]} = 2 ]; then
    $PY bench/trace_summary.py "${traces[@]}" >"$OUT/profile.md" 2>&1 || echo "trace_summary: exit $?" | tee -a "$LOG"
    head -20 "$OUT/profile.md"
  fi
  grep -h "samples/s steady" "$OUT/profile_synthetic.log" "$OUT/profile_gpu3.log"
  exit 0
fi

# The table: images/s and data wait of every setting, against the synthetic rate.
$PY - "$OUT" <<'EOF' | tee "$OUT/table.md"
import json, os, sys
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p))["rows"] if os.path.exists(p) else []
synthetic = max((r["samples_per_s"] or 0 for r in rows("synthetic")), default=0)
print(f"\nResNet-50, batch 128, bf16; synthetic uint8 batches: {synthetic:.0f} images/s\n")
print("| folder | cores (taskset) | decode | workers | images/s | of synthetic | data wait |")
print("| --- | --- | --- | --- | --- | --- | --- |")
names = sorted((n[:-5] for n in os.listdir(out) if n.endswith(".json") and n != "synthetic.json"),
               key=lambda n: (n.split("_c")[0] != "small", int(n.split("_c")[-1]) if "_c" in n else 99, n))
for name in names:
    folder, cores = (name.split("_c") + [""])[:2] if "_c" in name else (name, "all")
    for r in rows(name):
        decode = r.get("decode", "")
        if not r.get("fits"):
            print(f"| {folder} | {cores} | {decode} | {r['workers']} | {r.get('note', '')} | | |")
            continue
        share = r["samples_per_s"] / synthetic if synthetic else float("nan")
        print(f"| {folder} | {cores} | {decode} | {r['workers']} | {r['samples_per_s']:.0f} | {100 * share:.1f}% | "
              f"{100 * r['data_wait_share']:.2f}% |")
print()
for f in ("throughput.log", "torchvision.log"):
    p = os.path.join(out, f)
    if os.path.exists(p):
        for line in open(p):
            if "images/s" in line or "not measured" in line:
                print("- " + line.strip())
EOF
