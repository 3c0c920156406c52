// The CUDA stack this process runs on, as NVIDIA's libraries number it (util/versions.h writes
// the numbers as text): the CUDA runtime dtrain was compiled with and the one loaded, the CUDA
// version the driver supports, cuDNN and NCCL. Every number is 0 when unknown, and all of them
// in a CPU build (src/cuda/stub/versions.cpp).
#pragma once

namespace dtrain::detail {

struct CudaVersions {
  int runtime_compiled = 0;  // CUDART_VERSION
  int runtime = 0;           // cudaRuntimeGetVersion
  int driver = 0;            // cudaDriverGetVersion: the newest CUDA the driver supports (0: none)
  long cudnn_compiled = 0;   // the cuDNN LibTorch was built with
  long cudnn = 0;            // cudnnGetVersion of the loaded cuDNN (0: not loaded)
  int nccl = 0;              // ncclGetVersion
};

// Queries the runtime without creating a CUDA context.
CudaVersions cuda_versions();

}  // namespace dtrain::detail
