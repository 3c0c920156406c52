// CPU build: max-pooling always takes LibTorch's op.
#include "cuda/max_pool.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool max_pool_applies(const at::Tensor&, int, int, int) { return false; }
at::Tensor max_pool(const at::Tensor&, int, int, int) {
  throw Error("the max-pool kernels need a CUDA build of dtrain");
}

}  // namespace dtrain::detail
