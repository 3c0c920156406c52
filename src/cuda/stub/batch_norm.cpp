// CPU build: BatchNorm, the shortcut add and ReLU always take LibTorch's ops.
#include "cuda/fused_batch_norm.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool fused_batch_norm_applies(const at::Tensor&, const at::Tensor&, const BatchNormState&) {
  return false;
}
at::Tensor fused_batch_norm(const at::Tensor&, const at::Tensor&, const BatchNormState&, bool) {
  throw Error("the fused BatchNorm needs a CUDA build of dtrain");
}
std::array<at::Tensor, 2> fused_batch_norm_forked(const at::Tensor&, const at::Tensor&,
                                                  const BatchNormState&, bool) {
  throw Error("the fused BatchNorm needs a CUDA build of dtrain");
}

}  // namespace dtrain::detail
