// What this build knows about CUDA: whether it has it at all, and binding a rank to a GPU.
// The CPU build's answers are in src/cuda/stub/device.cpp.
#pragma once

namespace dtrain::detail {

// True in a CUDA build (a CUDA LibTorch, NCCL and dtrain's kernels), false in a CPU build.
bool built_with_cuda();
// Makes GPU `index` the current device of this process (a CPU build never calls it).
void set_current_device(int index);

}  // namespace dtrain::detail
