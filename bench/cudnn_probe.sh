#!/usr/bin/env bash
# Builds and runs bench/cudnn_probe/probe.cpp: which of cuDNN's fused convolution graphs (BatchNorm
# in the convolution's prologue and epilogue) run on this GPU, at what cost, checked against the
# plain convolution. cuDNN is the one the GPU machine's torch ships (its wheel's library); the
# headers are that wheel's, else the CUDA toolkit's, else $CUDNN_INCLUDE (for example cuDNN 9's
# headers carried in .deps/cudnn/include). Output to $OUT/cudnn_probe.log (default ./gpu-out).
#   DEADLINE=240 MAXPLANS=2 SHAPES="l1.3x3 l3.1x1" DTYPES=fp16 bash bench/cudnn_probe.sh
#   HEUR=all MAXPLANS=16 DEADLINE=500 DTYPES=fp16 bash bench/cudnn_probe.sh   # more plans a graph
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
nvidia=$($PY -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0] + "/x"))' 2>/dev/null || true)
lib=$(find -H ${nvidia:+"$nvidia"} /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 -name 'libcudnn.so.9*' 2>/dev/null | head -1)
[ -n "$lib" ] || { echo "cudnn_probe: no libcudnn.so.9 (looked in $nvidia and the system)"; exit 1; }
libdir=$(dirname "$lib")
inc=$(find -H ${nvidia:+"$nvidia"} "$libdir/.." /usr/include /usr/local/cuda/include -maxdepth 3 -name cudnn_graph.h 2>/dev/null | head -1 || true)
inc=${inc:+$(dirname "$inc")}
inc=${CUDNN_INCLUDE:-${inc:-$PWD/.deps/cudnn/include}}
cuda=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
echo "cudnn_probe: library $lib, headers $inc, CUDA $cuda" | tee "$OUT/cudnn_probe.log"
graph=$(ls "$libdir"/libcudnn_graph.so.9* 2>/dev/null | head -1 || true)
g++ -std=c++17 -O2 -Wno-deprecated-declarations -I"$inc" -I"$cuda/include" \
  bench/cudnn_probe/probe.cpp -o "$OUT/cudnn_probe" "$lib" ${graph:+"$graph"} \
  -L"$cuda/lib64" -lcudart -Wl,-rpath,"$libdir" -Wl,-rpath,"$cuda/lib64"
"$OUT/cudnn_probe" 2>&1 | tee -a "$OUT/cudnn_probe.log"
