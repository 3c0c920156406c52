// The one check of a CUDA runtime return code: anything but cudaSuccess is a dtrain::Error that
// names the call. (NCCL's and MPI's return codes have one macro each too, in src/comm/.)
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "dtrain/error.h"

#define DTRAIN_CUDA_CHECK(call)                                                \
  do {                                                                         \
    cudaError_t dtrain_cuda_rc_ = (call);                                      \
    if (dtrain_cuda_rc_ != cudaSuccess)                                        \
      throw ::dtrain::Error(std::string("CUDA call failed: ") + #call + ": " + \
                            cudaGetErrorString(dtrain_cuda_rc_));              \
  } while (0)
