// CPU build: no cuBLASLt; GPT's MLP takes at::linear and at::gelu (cuda/stub/mlp.cpp).
#include "cuda/blas_lt.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool gemm_gelu_fits(at::ScalarType, int64_t, int64_t) { return false; }
void gemm_gelu_aux_bias(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        const at::Tensor&) {
  throw Error("the cuBLASLt GELU GEMM needs a CUDA build of dtrain", "model.fused_mlp");
}

}  // namespace dtrain::detail
