// CPU build: Linear layers always take at::linear.
#include "cuda/fused_linear.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool fused_linear_applies(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor fused_linear(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  throw Error("dtrain's CUDA Linear needs a CUDA build of dtrain");
}

}  // namespace dtrain::detail
