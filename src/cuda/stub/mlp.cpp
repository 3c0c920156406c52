// CPU build: GPT's MLP always takes at::linear and at::gelu.
#include "cuda/fused_mlp.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool fused_mlp_applies(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       const at::Tensor&) {
  return false;
}
at::Tensor fused_mlp(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                     const at::Tensor&) {
  throw Error("dtrain's fused MLP needs a CUDA build of dtrain");
}

}  // namespace dtrain::detail
