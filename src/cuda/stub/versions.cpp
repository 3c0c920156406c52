// CPU build: no CUDA runtime, driver, cuDNN or NCCL (every number 0).
#include "cuda/versions.h"

namespace dtrain::detail {

CudaVersions cuda_versions() { return {}; }

}  // namespace dtrain::detail
