// CPU build: residual + LayerNorm always take LibTorch's ops.
#include "cuda/fused_norm.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool fused_layer_norm_applies(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&) {
  return false;
}
std::pair<at::Tensor, at::Tensor> fused_residual_layer_norm(const at::Tensor&, const at::Tensor&,
                                                            const at::Tensor&, const at::Tensor&,
                                                            double) {
  throw Error("the fused residual LayerNorm needs a CUDA build of dtrain");
}

}  // namespace dtrain::detail
