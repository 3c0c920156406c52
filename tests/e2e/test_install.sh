#!/usr/bin/env bash
# e2e: dtrain as an installed library. `cmake --install` of the built tree into a scratch prefix
# gives the program, the public headers (exactly include/dtrain/, each of whose includes
# resolves inside the prefix), the library and the CMake package; examples/ then configures as a
# project of its own with find_package(dtrain) (the prefix only: no path into the source tree
# reaches its build), builds, and each example runs: the trainers under mpirun -np 2.
# The scratch folder is $DTRAIN_BUILD_DIR/install-test (fixed, so a compiler cache can serve a
# second run; emptied first).
# Env (set by ctest; defaults for a manual run): DTRAIN_BUILD_DIR, DTRAIN_SOURCE_DIR, DTRAIN_CMAKE,
# DTRAIN_CMAKE_GENERATOR, DTRAIN_CXX_LAUNCHER, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build=${DTRAIN_BUILD_DIR:-$src/build}
cmake=${DTRAIN_CMAKE:-cmake}
generator=${DTRAIN_CMAKE_GENERATOR:-Ninja}
[[ -f $build/CMakeCache.txt ]] || fail "no configured build in $build"
tmp=$build/install-test
rm -rf "$tmp"
mkdir -p "$tmp"
prefix=$tmp/prefix

run 300 install "$cmake" --install "$build" --prefix "$prefix"
[[ $rc == 0 ]] || { show install; fail "cmake --install: exit code $rc"; }

# What is installed.
for f in bin/dtrain lib/libdtrain.a lib/cmake/dtrain/dtrainConfig.cmake \
  lib/cmake/dtrain/dtrainConfigVersion.cmake lib/cmake/dtrain/dtrainTargets.cmake; do
  [[ -f $prefix/$f ]] || fail "not installed: $prefix/$f"
done
want=$(cd "$src/include" && find dtrain -name '*.h' | sort)
got=$(cd "$prefix/include" && find dtrain -type f | sort)
[[ $want == "$got" ]] || fail "installed headers differ from include/dtrain/:"$'\n'"$(diff <(echo "$want") <(echo "$got"))"
# Every quoted include of an installed header is an installed header (none from src/).
while IFS= read -r line; do
  file=${line%%:*}
  inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
  [[ -f $prefix/include/$inc ]] || fail "$file includes \"$inc\", which is not installed"
done < <(cd "$prefix/include" && grep -rH '#include "' dtrain)
echo "ok: installed the program, $(wc -l <<<"$got") public headers, the library and the package"

run 60 version "$prefix/bin/dtrain" --version
[[ $rc == 0 ]] || { show version; fail "installed dtrain --version: exit code $rc"; }
grep -q '^dtrain [0-9]' "$tmp/version.out" || { show version; fail "no version line"; }

# examples/ against the installed package only.
conf=(-S "$src/examples" -B "$tmp/examples" -G "$generator" -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_PREFIX_PATH="$prefix")
# The launcher as a CMake list ('|' stands for ';' in ctest's environment).
[[ -n ${DTRAIN_CXX_LAUNCHER:-} ]] && conf+=(-DCMAKE_CXX_COMPILER_LAUNCHER="${DTRAIN_CXX_LAUNCHER//|/;}")
run 300 configure "$cmake" "${conf[@]}"
[[ $rc == 0 ]] || { show configure; fail "configuring examples/ with find_package(dtrain): exit code $rc"; }
grep -q "dtrain 0\.[0-9.]* from $prefix/lib/cmake/dtrain" "$tmp/configure.out" ||
  { show configure; fail "examples/ did not find dtrain in $prefix"; }
# No include path into the source tree (the build files: Ninja's or Makefiles').
st=0
grep -rqE --include='*.ninja' --include='flags.make' -e "(-I|-isystem ?)$src/(src|include)\b" \
  "$tmp/examples" || st=$?
[[ $st == 1 ]] || fail "the examples' build reaches into the source tree $src (grep status $st)"
run 600 compile "$cmake" --build "$tmp/examples" -j 2
[[ $rc == 0 ]] || { show compile; fail "building examples/ against the installed dtrain: exit code $rc"; }
echo "ok: examples/ configured with find_package(dtrain) and built against $prefix"

ex=$tmp/examples
mpi=("$mpiexec" "${mpi_flags[@]}" -np 2)  # for run, which takes a command (no functions)

# trains NAME PATTERN MIN WHAT: example_NAME on 2 ranks ends well and its line PATTERN (a sed
# pattern whose group is the test accuracy in percent) says more than MIN percent.
trains() {
  local name=$1 pattern=$2 min=$3 what=$4 acc
  run 300 "$name" "${mpi[@]}" "$ex/example_$name"
  [[ $rc == 0 ]] || { show "$name"; fail "example_$name: exit code $rc"; }
  acc=$(sed -nE "s/$pattern/\1/p" "$tmp/$name.out")
  [[ -n $acc ]] || { show "$name"; fail "example_$name: no line matching '$pattern'"; }
  awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a > m) }' ||
    fail "example_$name: test accuracy $acc% ($what; expected > $min%)"
  echo "ok: example_$name trained on 2 ranks, test accuracy $acc%"
}
trains train_loop '.*train loop: test accuracy ([0-9.]+)% of 2048 samples, 2 rank\(s\) in step.*' 85 "4 classes"
trains custom_dataset '.*custom dataset: test accuracy ([0-9.]+)%.*' 90 "3 spirals"

run 300 custom_model "${mpi[@]}" "$ex/example_custom_model" train.epochs=1
[[ $rc == 0 ]] || { show custom_model; fail "example_custom_model: exit code $rc"; }
grep -q "model: residual_mlp" "$tmp/custom_model.out" || { show custom_model; fail "example_custom_model: the registered model was not built"; }
grep -q "custom model: test accuracy" "$tmp/custom_model.out" || { show custom_model; fail "example_custom_model: no accuracy line"; }
echo "ok: example_custom_model trained its registered model on 2 ranks"

run 300 custom_hook "${mpi[@]}" "$ex/example_custom_hook" run.dir="$tmp/runs" train.epochs=2
[[ $rc == 0 ]] || { show custom_hook; fail "example_custom_hook: exit code $rc"; }
csv=$tmp/runs/custom_hook/loss.csv
[[ -s $csv ]] || { show custom_hook; fail "example_custom_hook: no $csv"; }
[[ $(head -1 "$csv") == "step,epoch,loss,lr" && $(wc -l <"$csv") -gt 1 ]] ||
  fail "example_custom_hook: $csv has no loss rows"
grep -q "custom hook: [0-9]* steps" "$tmp/custom_hook.out" || { show custom_hook; fail "example_custom_hook: no summary line"; }
echo "ok: example_custom_hook ran its hooks on 2 ranks ($(($(wc -l <"$csv") - 1)) loss rows)"

rm -rf "$tmp"  # kept when a step fails, for a look
