#!/usr/bin/env bash
# Two builds of dtrain side by side on one GPU machine: the same benchmarks with each, in
# alternating order, so that drift between runs hits both alike. For a change that must not
# change speed (a refactoring), or to measure one that should.
#
#   bash launch/compare.sh build BASE                 # build BASE (another dtrain checkout) and
#                                                     # this tree, in parallel, with launch/gpu.sh
#   bash launch/compare.sh bench BASE [ROUNDS] [CASES...]
#       CASES from: gpt2 gpt2_eager resnet50 resnet50_eager tiny tiny_eager tiny_eager_w0 cnn
#       (default: all but tiny_eager_w0, the per-step host cost without loader threads);
#       ROUNDS (default 2): runs of each case with each build, order base, this, this, base, ...
#
# Logs go to $OUT (else ./gpu-out)/compare/; the table (compare.md) to $OUT. A build that is not
# there yet is made first. Fashion-MNIST (cnn) as in gpu.sh: $DTRAIN_FASHION_MNIST, else
# /usr/share/datasets/fashion-mnist, else .data/fashion-mnist.
set -uo pipefail
cd "$(dirname "$0")/.."
here=$PWD
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/compare"
export NCCL_NVLS_ENABLE=0
FMNIST=${DTRAIN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || FMNIST=$PWD/.data/fashion-mnist

usage() { sed -n '2,15s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
mode=$1
base=$(cd "$2" && pwd) || usage
shift 2

build_both() {
  (cd "$base" && OUT="$OUT/compare/base" bash launch/gpu.sh build >/dev/null) &
  local b=$!
  OUT="$OUT/compare/this" bash launch/gpu.sh build >/dev/null
  local rc=$?
  wait $b || rc=1
  [ -x "$base/build-gpu/bin/dtrain" ] && [ -x "$here/build-gpu/bin/dtrain" ] || rc=1
  echo "builds: $([ $rc = 0 ] && echo ok || echo FAILED; ls -la "$base/build-gpu/bin/dtrain" "$here/build-gpu/bin/dtrain" 2>&1 | awk '{print $NF}' | tr '\n' ' ')"
  return $rc
}

# The overrides of a case (its config is bench/configs/<model>.yaml of each tree).
case_config() {
  case $1 in
    gpt2) echo "gpt2.yaml" ;;
    gpt2_eager) echo "gpt2.yaml train.cuda_graph=off" ;;
    resnet50) echo "resnet50.yaml" ;;
    resnet50_eager) echo "resnet50.yaml train.cuda_graph=off" ;;
    tiny) echo "tiny.yaml" ;;
    tiny_eager) echo "tiny.yaml train.cuda_graph=off" ;;
    tiny_eager_w0) echo "tiny.yaml train.cuda_graph=off data.workers=0" ;;  # no loader threads
    cnn) echo "cnn.yaml data.path=$FMNIST" ;;
    *) echo "unknown case $1" >&2; return 1 ;;
  esac
}

# run_one TREE TAG CASE: one run; prints its steady rate (the last progress line's samples/s).
run_one() {
  local tree=$1 tag=$2 name=$3 cfg rest log
  read -r cfg rest <<<"$(case_config "$name")"
  log="$OUT/compare/${name}_${tag}.log"
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-240}" "$tree/build-gpu/bin/dtrain" "$tree/bench/configs/$cfg" $rest \
    run.dir="$OUT/compare/runs" run.name="${name}_${tag}" >"$log" 2>&1
  grep -E "step [0-9]+/[0-9]+ .* samples/s" "$log" | tail -1 | sed -E 's/.* ([0-9.]+) samples\/s.*/\1/'
}

bench() {
  local rounds=${1:-2}
  shift || true
  local cases=${*:-gpt2 gpt2_eager resnet50 resnet50_eager tiny tiny_eager cnn}
  [ -x "$base/build-gpu/bin/dtrain" ] && [ -x "$here/build-gpu/bin/dtrain" ] || build_both || return 1
  {
    echo "| case | base (samples/s) | this tree (samples/s) | this / base |"
    echo "| --- | --- | --- | --- |"
  } >"$OUT/compare.md"
  for c in $cases; do
    local a=() b=() r
    for ((i = 0; i < rounds; i++)); do
      if ((i % 2 == 0)); then
        a+=("$(run_one "$base" "base$i" "$c")"); b+=("$(run_one "$here" "this$i" "$c")")
      else
        b+=("$(run_one "$here" "this$i" "$c")"); a+=("$(run_one "$base" "base$i" "$c")")
      fi
    done
    r=$(python3 -c "
import statistics, sys
a = [float(x) for x in sys.argv[1].split() if x]
b = [float(x) for x in sys.argv[2].split() if x]
print('%.3f' % (statistics.median(b) / statistics.median(a)) if a and b else 'n/a')" "${a[*]}" "${b[*]}")
    echo "| $c | ${a[*]} | ${b[*]} | $r |" | tee -a "$OUT/compare.md"
  done
}

case $mode in
  build) build_both ;;
  bench) bench "$@" ;;
  *) usage ;;
esac
