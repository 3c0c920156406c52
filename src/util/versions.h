// Version numbers as NVIDIA's libraries report them (integers), written the way their users read
// them: the CUDA runtime and driver (12040 -> "12.4"), cuDNN (90100 -> "9.1.0") and NCCL
// (22105 -> "2.21.5"). 0 (unknown) is "".
#pragma once

#include <string>

namespace dtrain::detail {

// cudaRuntimeGetVersion / cudaDriverGetVersion / CUDART_VERSION: 1000 * major + 10 * minor.
std::string cuda_version_text(int v);
// cudnnGetVersion / CUDNN_VERSION: 10000 * major + 100 * minor + patch from 9.0, 1000 * major +
// 100 * minor + patch before.
std::string cudnn_version_text(long v);
// ncclGetVersion / NCCL_VERSION_CODE: 10000 * major + 100 * minor + patch from 2.9, 1000 *
// major + 100 * minor + patch before.
std::string nccl_version_text(int v);

}  // namespace dtrain::detail
