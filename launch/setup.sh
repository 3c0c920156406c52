#!/usr/bin/env bash
# The README's two commands:
#
#   bash launch/setup.sh demo [section.key=value ...]   install, build, train a CNN on 2 MPI ranks
#   bash launch/setup.sh test                           install, build, run every test (ctest)
#
# 1. Installs the Debian/Ubuntu packages dtrain needs, only those missing (as root: apt-get;
#    otherwise it prints the sudo line to run and stops). DTRAIN_SKIP_INSTALL=1 skips this step
#    (a machine whose dependencies come from elsewhere, e.g. a CUDA PyTorch's LibTorch).
# 2. Configures (CMake, Ninja, Release) and builds into build/ with one job per core; a second
#    run only rebuilds what changed.
# 3. demo: mpirun -np 2 build/bin/dtrain configs/fashion_mnist.yaml (through mpirun-local.sh);
#    test: ctest --test-dir build --output-on-failure -j <cores>, and exits with its code.
set -euo pipefail

usage() {
  sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
mode=$1
shift
case $mode in
  demo) ;;
  test) [[ $# == 0 ]] || { echo "setup.sh test takes no further arguments" >&2; usage; } ;;
  -h | --help | help) usage ;;
  *) echo "setup.sh: unknown command '$mode'" >&2; usage ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { echo "== setup: $*"; }

# ---- 1. packages ------------------------------------------------------------------------------
# Why each: compiler and build tools; LibTorch (tensors, autograd, nn); OpenMPI (launcher and CPU
# collectives); yaml-cpp (configs); zlib (.gz IDX files, checkpoint files' CRC-32); nlohmann-json
# (metrics files); CLI11 (arguments); GoogleTest/GoogleMock (tests); python3-torch (reference
# values in tests only);
# Fashion-MNIST (the demo's data and the e2e tests'); fortunes (text for configs/text_gpt.yaml
# and the token-data tests); libjpeg-turbo's TurboJPEG and libpng (decoding image folders);
# python3-pil (reference pixels and image folders for the tests, bench/make_jpeg_folder.py);
# OpenBLAS with OpenMP threads (Debian's CPU LibTorch multiplies matrices through libblas.so.3,
# which is otherwise the reference BLAS: GPT-sized CPU steps run about 5x faster); ccache (a
# second build of the same sources, another clone's too, recompiles only what changed).
packages=(build-essential cmake ninja-build libtorch-dev libopenmpi-dev openmpi-bin
          libyaml-cpp-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
          python3-torch dataset-fashion-mnist fortunes libturbojpeg0-dev libpng-dev python3-pil
          libopenblas0-openmp ccache)
# The test suite only: Slurm and munge, which the slurm tier starts as a one-node cluster of its
# own to run launch/dtrain-slurm.sbatch for real (tests/slurm/); iproute2 and util-linux (ip,
# nsenter, unshare), with which the cluster tier makes hosts of network namespaces (tests/cluster/);
# clang-format, with which the unit tier checks that the sources keep .clang-format (test_format.cpp);
# python3-torchvision, the reference pixels of the image recipe's tests (automatic augmentation,
# random erasing, mixup and cutmix against torchvision's own functions).
if [[ $mode == test ]]; then
  packages+=(slurm-wlm munge iproute2 util-linux clang-format python3-torchvision)
fi

# A CUDA PyTorch in python3 brings a CUDA LibTorch (and reference values for the tests): build
# against it instead of Debian's CPU libtorch-dev. A CPU PyTorch, or a python3 without torch (pyenv,
# virtualenv), changes nothing.
torch_prefix=$(python3 -c 'import sys, torch
if not torch.version.cuda: sys.exit(1)
print(torch.utils.cmake_prefix_path)' 2>/dev/null) || torch_prefix=""
if [[ -n $torch_prefix ]]; then
  say "CUDA PyTorch found: building against its LibTorch ($torch_prefix)"
  packages=("${packages[@]/libtorch-dev/}")
  packages=("${packages[@]/python3-torchvision/}")
  packages=("${packages[@]/python3-torch/}")
fi

install_packages() {
  if [[ ${DTRAIN_SKIP_INSTALL:-0} == 1 ]]; then
    say "DTRAIN_SKIP_INSTALL=1: not checking packages"
    return
  fi
  if ! command -v dpkg-query >/dev/null; then
    say "no dpkg-query (not Debian/Ubuntu): install the equivalents of these yourself: ${packages[*]}"
    return
  fi
  local missing=() p
  for p in "${packages[@]}"; do
    [[ -n $p ]] || continue
    if [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) != ii* ]]; then
      missing+=("$p")
    fi
  done
  if [[ ${#missing[@]} == 0 ]]; then
    say "all required packages are installed"
    return
  fi
  if [[ $(id -u) != 0 ]]; then
    echo "setup.sh: missing packages: ${missing[*]}" >&2
    echo "Install them, then run this again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
}
install_packages

# ---- 2. build ---------------------------------------------------------------------------------
jobs=$(nproc)
build=build
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_BUILD_TESTS=ON)
if [[ -n $torch_prefix ]]; then cmake_args+=("-DCMAKE_PREFIX_PATH=$torch_prefix"); fi
cache=$build/CMakeCache.txt
cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache" 2>/dev/null; }
if [[ -f $cache && $(cached CMAKE_GENERATOR) != Ninja ]]; then
  echo "setup.sh: $build/ was configured with '$(cached CMAKE_GENERATOR)', not Ninja; remove it (rm -rf $build) and run again" >&2
  exit 1
fi
# Configure once; afterwards Ninja re-runs CMake by itself when a CMakeLists.txt changes.
if [[ ! -f $build/build.ninja || $(cached CMAKE_BUILD_TYPE) != Release ||
      $(cached DTRAIN_BUILD_TESTS) != ON ||
      ( -n $torch_prefix && $(cached CMAKE_PREFIX_PATH) != "$torch_prefix" ) ]]; then
  say "configuring: cmake ${cmake_args[*]}"
  cmake "${cmake_args[@]}"
fi

if [[ $mode == demo ]]; then
  say "building dtrain ($jobs jobs)"
  cmake --build "$build" --target dtrain_cli -j "$jobs"
else
  say "building everything ($jobs jobs)"
  cmake --build "$build" -j "$jobs"
fi

# ---- 3. run -----------------------------------------------------------------------------------
# Root may run OpenMPI; more ranks than cores are allowed (the tests use up to 4 ranks).
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
if [[ $mode == demo ]]; then
  say "training a CNN on Fashion-MNIST with 2 MPI ranks"
  # A new run directory each time: a run never overwrites an earlier one's files.
  exec bash launch/mpirun-local.sh 2 configs/fashion_mnist.yaml \
    run.name="fashion_mnist-$(date +%Y%m%d-%H%M%S)" "$@"
fi

export OMPI_MCA_rmaps_base_oversubscribe=1
# One test per core at a time: the tests' time bounds hold with the other core busy (the slowest
# tests wait on daemons, timers and MPI ranks more than they compute).
say "running the tests: ctest --test-dir $build --output-on-failure -j $jobs"
rc=0
ctest --test-dir "$build" --output-on-failure -j "$jobs" || rc=$?
if [[ $rc == 0 ]]; then say "all tests passed"; else say "ctest failed (exit $rc)"; fi
exit "$rc"
