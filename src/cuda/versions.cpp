// CUDA build: the versions of the CUDA runtime, the driver, cuDNN and NCCL.
#include "cuda/versions.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

namespace dtrain::detail {

CudaVersions cuda_versions() {
  CudaVersions v;
  v.runtime_compiled = CUDART_VERSION;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  try {
    v.cudnn_compiled = at::detail::getCUDAHooks().versionCuDNN();
  } catch (...) {
    v.cudnn_compiled = 0;  // LibTorch without cuDNN
  }
  // LibTorch's CUDA library links cuDNN: when it is loaded, ask it which version it is.
  using GetVersion = size_t (*)();
  if (auto get = reinterpret_cast<GetVersion>(dlsym(RTLD_DEFAULT, "cudnnGetVersion")))
    v.cudnn = static_cast<long>(get());
  if (ncclGetVersion(&v.nccl) != ncclSuccess) v.nccl = 0;
  return v;
}

}  // namespace dtrain::detail
