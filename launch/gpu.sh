#!/usr/bin/env bash
# dtrain on a GPU machine: build against the CUDA LibTorch found there, run the gpu and dist
# tiers on the GPU, and run the benchmarks side by side with plain PyTorch.
#
#   bash launch/gpu.sh build          # CMake + Ninja into build-gpu/ (TARGETS="dtrain_cli
#                                     # dtrain_gpu_tests": only those)
#   bash launch/gpu.sh test           # gpu tier, then dist tier (ranks share the GPU via MPI)
#   bash launch/gpu.sh bench [CASES]  # CASES from: gpt2 resnet50 resnet50jpeg tiny cnn gpt2compile
#                                     # resnet50compile profile (default: all but profile)
#   bash launch/gpu.sh observe        # dtrain env, dtrain bench (GPT-2 sweep up to out of memory),
#                                     # a ResNet-50 run with its report, TensorBoard read back
#   bash launch/gpu.sh ladder [PARTS] # bench/memory_ladder.py: checkpointing and the sharded
#                                     # optimizer, peak memory and speed (parts A, B, C: all
#                                     # three may pass a device call's 10 minutes: A, then BC)
#   bash launch/gpu.sh decode [accuracy|profile]  # bench/gpu_decode.sh: data.decode gpu against cpu
#   bash launch/gpu.sh syncbn [compile] # bench/sync_batch_norm.sh: ResNet-50 on 1, 2, 4 NCCL ranks
#                                     # sharing the GPU, model.sync_batch_norm off and on, against
#                                     # PyTorch DDP with BatchNorm and nn.SyncBatchNorm
#   bash launch/gpu.sh recipe         # bench/image_recipe.sh: the image recipe's cost, against PyTorch
#   bash launch/gpu.sh checkpoint     # bench/checkpoint_stall.sh: a save's stall, synchronous
#                                     # against background (checkpoint.async), GPT-2 and ResNet-50
#   bash launch/gpu.sh resnet [PARTS] # bench/resnet_speed.sh: ResNet against torch.compile (parts
#                                     # A, T, B, C, P; each a device call's worth)
#   bash launch/gpu.sh all            # build, test, bench
#
# Logs and results go to $OUT if set (else ./gpu-out): build.log, test.log, bench.log and
# results.md (the table for docs/PERFORMANCE.md). Fashion-MNIST is read from
# $DTRAIN_FASHION_MNIST (default: /usr/share/datasets/fashion-mnist, else .data/fashion-mnist).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-python3}
FMNIST=${DTRAIN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || FMNIST=$PWD/.data/fashion-mnist
BIN=build-gpu/bin/dtrain
[ -d /opt/dtrain-deps/usr/lib/x86_64-linux-gnu ] &&
  export LD_LIBRARY_PATH=/opt/dtrain-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# A GPU image without the image libraries' headers: Debian packages of libturbojpeg0-dev,
# libturbojpeg0, libpng-dev, libpng16-16 and zlib1g-dev (`apt-get download ...`) in $DTRAIN_DEBS
# are unpacked into /opt/dtrain-deps and searched by CMake and the loader.
unpack_debs() {
  local d=${DTRAIN_DEBS:-.deps}
  ls "$d"/*.deb >/dev/null 2>&1 || return 0
  for f in "$d"/*.deb; do dpkg -x "$f" /opt/dtrain-deps; done
  EXTRA_PREFIX=/opt/dtrain-deps/usr
  case ":${LD_LIBRARY_PATH:-}:" in *:/opt/dtrain-deps/usr/lib/x86_64-linux-gnu:*) ;; *)
    export LD_LIBRARY_PATH=/opt/dtrain-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
}

# The tests' reference Python (DTRAIN_REF_PYTHON) is the one whose torch the build links.
build() {
  local prefix
  prefix=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)') || { echo "no torch in $PY"; return 1; }
  unpack_debs
  { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix${EXTRA_PREFIX:+;$EXTRA_PREFIX}" \
      -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DDTRAIN_REF_PYTHON="$(command -v "$PY")" &&
    ninja -C build-gpu ${TARGETS:-}; } 2>&1 | tee "$OUT/build.log" | grep -E "error|FAILED|dtrain:|Linking CXX executable bin" ; return "${PIPESTATUS[0]}"
}

test_tiers() {
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 900
    # Several ranks on one GPU through the MPI backend (dist tier, CUDA cases included).
    ctest --test-dir build-gpu -L dist --output-on-failure --timeout 600
  } 2>&1 | tee "$OUT/test.log" | grep -E "tests passed|Passed|Failed|FAILED|\[  FAILED|skipped|uncapped|gpu tests"
}

# The last progress line's samples/s (steady state, after warm-up) of a dtrain run.
last_rate() { grep -E "samples/s" "$1" | grep -v "^done" | tail -1 | sed -E 's/.* ([0-9.]+) samples\/s.*/\1/'; }

bench_one() {
  local name=$1
  shift
  echo "== $name" | tee -a "$OUT/bench.log"
  timeout "${BENCH_TIMEOUT:-300}" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -3 "$OUT/$name.log" | tee -a "$OUT/bench.log"
  [ $rc -eq 0 ] || echo "$name: exit $rc" | tee -a "$OUT/bench.log"
}

bench() {
  local cases=${*:-gpt2 resnet50 resnet50jpeg tiny cnn gpt2compile resnet50compile}
  : >"$OUT/bench.log"
  for c in $cases; do
    case $c in
      gpt2)
        bench_one dtrain_gpt2 $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs"
        bench_one dtrain_gpt2_eager $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs" train.cuda_graph=off run.name=gpt2_eager
        # The gradient engine on one rank (NCCL all-reduce of every bucket): its overhead.
        bench_one dtrain_gpt2_reduce $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs" dist.reduce_single_rank=true run.name=gpt2_reduce
        bench_one dtrain_gpt2_reduce_nooverlap $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs" dist.reduce_single_rank=true dist.overlap=false run.name=gpt2_nooverlap
        bench_one torch_gpt2_eager $PY bench/torch_gpt2.py
        bench_one dtrain_gpt2_fp32 $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs" train.precision=fp32 run.tf32=true run.name=gpt2_fp32
        bench_one torch_gpt2_fp32 $PY bench/torch_gpt2.py --fp32 ;;
      gpt2reduce)  # the gradient engine on one rank, graph on, against the plain graph step
        bench_one dtrain_gpt2 $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs"
        bench_one dtrain_gpt2_reduce $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs" dist.reduce_single_rank=true run.name=gpt2_reduce
        bench_one dtrain_gpt2_reduce_nooverlap $BIN bench/configs/gpt2.yaml run.dir="$OUT/runs" dist.reduce_single_rank=true dist.overlap=false run.name=gpt2_nooverlap ;;
      gpt2compile)  # separate: compilation takes a minute or more
        bench_one torch_gpt2_compile $PY bench/torch_gpt2.py --compile
        bench_one torch_gpt2_compile_outside $PY bench/torch_gpt2.py --compile --loss-outside ;;
      resnet50compile)
        bench_one torch_resnet50_compile $PY bench/torch_resnet.py --compile ;;
      resnet50)
        bench_one dtrain_resnet50 $BIN bench/configs/resnet50.yaml run.dir="$OUT/runs"
        bench_one dtrain_resnet50_eager $BIN bench/configs/resnet50.yaml run.dir="$OUT/runs" train.cuda_graph=off run.name=resnet50_eager
        bench_one dtrain_resnet50_fp32 $BIN bench/configs/resnet50.yaml run.dir="$OUT/runs" train.precision=fp32 run.name=resnet50_fp32
        bench_one torch_resnet50 $PY bench/torch_resnet.py
        bench_one torch_resnet50_fp32 $PY bench/torch_resnet.py --fp32 ;;
      resnet50jpeg)  # ResNet-50 fed from JPEG files (bench/README.md): the loader or the GPU?
        [ -d "$OUT/jpeg/train" ] || $PY bench/make_jpeg_folder.py "$OUT/jpeg" --images 4000 | tee -a "$OUT/bench.log"
        bench_one dtrain_resnet50_jpeg $BIN bench/configs/resnet50_jpeg.yaml data.path="$OUT/jpeg" run.dir="$OUT/runs"
        bench_one dtrain_resnet50_jpeg_workers $BIN bench bench/configs/resnet50_jpeg.yaml data.path="$OUT/jpeg" \
          --workers 2,4,8,12,15 --out "$OUT/runs/resnet50_jpeg_workers" ;;
      tiny)
        bench_one dtrain_tiny $BIN bench/configs/tiny.yaml run.dir="$OUT/runs"
        bench_one dtrain_tiny_eager $BIN bench/configs/tiny.yaml run.dir="$OUT/runs" train.cuda_graph=off run.name=tiny_eager
        bench_one torch_tiny $PY bench/torch_tiny.py ;;
      cnn)
        bench_one dtrain_cnn $BIN bench/configs/cnn.yaml data.path="$FMNIST" run.dir="$OUT/runs"
        bench_one torch_cnn $PY bench/torch_cnn.py ;;
      profile)  # where the GPU time goes, dtrain (eager and graph) against PyTorch eager
        mkdir -p "$OUT/runs"
        for m in ${PROFILE_MODELS:-gpt2 resnet50}; do
          local py=bench/torch_gpt2.py
          [ $m = resnet50 ] && py=bench/torch_resnet.py
          for g in off on; do
            bench_one dtrain_${m}_profile_$g $BIN bench/configs/$m.yaml run.dir="$OUT/runs" run.name=${m}_prof_$g \
              train.cuda_graph=$g run.profile_start=12 run.profile_steps=5 train.max_steps=20 train.epochs=3
          done
          bench_one torch_${m}_profile $PY $py --profile "$OUT/runs/torch_${m}_trace.json"
          $PY bench/trace_summary.py "$OUT/runs/${m}_prof_off/trace.rank0.json" "$OUT/runs/torch_${m}_trace.json" \
            >"$OUT/profile_${m}.md" 2>&1
          $PY bench/trace_summary.py "$OUT/runs/${m}_prof_on/trace.rank0.json" "$OUT/runs/torch_${m}_trace.json" \
            >"$OUT/profile_${m}_graph.md" 2>&1
        done ;;
    esac
  done
  $PY bench/summarize.py "$OUT" | tee "$OUT/results.md"
}

# What issue 11's tools say on this GPU: outputs kept in docs/observe/ by whoever runs this.
observe() {
  local o=$OUT/observe
  mkdir -p "$o"
  $BIN --version >"$o/version.txt" 2>&1
  $BIN env >"$o/env.txt" 2>&1; echo "env exit $?" >>"$o/env.txt"
  mpirun -np 2 $BIN env >"$o/env_np2.txt" 2>&1; echo "env exit $?" >>"$o/env_np2.txt"
  rm -f "$o"/bench-gpt2.*
  timeout 240 $BIN bench bench/configs/gpt2.yaml --micro-batches 8,16,32,64,128,512 --warmup-steps 5 --steps 15 \
    data.synthetic_size=4096 --out "$o/bench-gpt2" >"$o/bench-gpt2.txt" 2>&1; echo "bench exit $?" >>"$o/bench-gpt2.txt"
  timeout 200 $BIN bench/configs/resnet50.yaml run.dir="$o/runs" run.name=resnet50 train.epochs=15 \
    run.log_every=10 run.timeline=true >"$o/resnet50.txt" 2>&1; echo "resnet50 exit $?" >>"$o/resnet50.txt"
  timeout 200 $BIN bench/configs/gpt2.yaml run.dir="$o/runs" run.name=gpt2 train.max_steps=60 train.epochs=2 \
    run.log_every=10 >"$o/gpt2.txt" 2>&1; echo "gpt2 exit $?" >>"$o/gpt2.txt"
  $PY tests/gpu/check_tensorboard.py "$o/runs/gpt2" mfu mfu_llmc tokens_per_s gpu/utilization memory/peak_gib \
    >"$o/tensorboard_check.txt" 2>&1; echo "check exit $?" >>"$o/tensorboard_check.txt"
  tail -n 3 "$o/runs/gpt2/metrics.jsonl" >"$o/gpt2_metrics_tail.jsonl" 2>&1
}

# Everything but results.md and the profiles in one archive (the device runner returns few files).
pack() {
  # Run directories hold weights, checkpoints and traces (gigabytes): only their text comes back.
  (cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude='*.json' --exclude='*.json.gz' \
     --exclude='*.pt' --exclude='checkpoint*' --exclude='*.tfevents*' \
     --exclude=results.md --exclude='profile_*.md' . 2>/dev/null)
}

case ${1:-all} in
  build) build ;;
  test) test_tiers ;;
  bench) shift; bench "$@"; pack ;;
  observe) observe ;;
  ladder) shift; $PY bench/memory_ladder.py --bin "$BIN" --out "$OUT/ladder" --parts "${1:-ABC}" 2>&1 | tee -a "$OUT/ladder.log" ;;
  resnet) shift; OUT=$OUT/resnet bash bench/resnet_speed.sh "$@" ;;
  syncbn) shift; OUT=$OUT/syncbn bash bench/sync_batch_norm.sh "$@" ;;
  recipe) shift; unpack_debs; OUT=$OUT/recipe bash bench/image_recipe.sh "$@" ;;
  checkpoint) shift; OUT=$OUT/checkpoint bash bench/checkpoint_stall.sh "$@" ;;
  decode) shift; unpack_debs; DTRAIN_FASHION_MNIST=$FMNIST OUT=$OUT/decode bash bench/gpu_decode.sh "$@" ;;
  all) build && test_tiers; bench; pack ;;
  *) echo "usage: $0 build|test|bench [cases]|observe|ladder [ABC]|decode [accuracy|profile]|resnet [ATBCP]|syncbn [compile]|recipe|all"; exit 2 ;;
esac
