// CPU build: the head and the loss always take at::linear and cross_entropy.
#include "cuda/fused_head.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool fused_head_loss_applies(const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor fused_head_loss(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                           double) {
  throw Error("the fused head and loss need a CUDA build of dtrain");
}

}  // namespace dtrain::detail
