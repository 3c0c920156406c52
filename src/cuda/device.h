// What this build knows about CUDA: whether it has it at all, and binding a rank to a GPU.
// The CPU build's answers are in src/cuda/stub/device.cpp.
#pragma once

#include <string>

namespace dtrain::detail {

// True in a CUDA build (a CUDA LibTorch, NCCL and dtrain's kernels), false in a CPU build.
bool built_with_cuda();
// Makes GPU `index` the current device of this process (a CPU build never calls it).
void set_current_device(int index);
// GPU `index`'s name ("NVIDIA H200") and PCI bus id ("0000:19:00.0"); "" in a CPU build.
std::string device_name(int index);
std::string pci_bus_id(int index);

}  // namespace dtrain::detail
