// The c_fc GEMM of GPT's MLP with its bias and GELU in cuBLASLt's epilogue (Note [MLP GEMM
// epilogues] in fused_mlp.h). Row-major tensors as LibTorch holds them; CUDA build only.
#pragma once

#include <ATen/ATen.h>

namespace dtrain::detail {

// h = gelu_tanh(pre), pre = x · wᵀ + bias, in one GEMM: x (N, K) contiguous, w a Linear weight
// (M, K), bias (M,), h and pre (N, M) contiguous, all fp16 or all bf16, on the current stream.
// Throws an Error naming model.fused_mlp when cuBLASLt has no kernel for the case.
void gemm_gelu_aux_bias(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                        const at::Tensor& h, const at::Tensor& pre);

// Whether gemm_gelu_aux_bias takes this dtype and these widths (cuBLASLt's alignment).
bool gemm_gelu_fits(at::ScalarType dtype, int64_t k, int64_t m);

}  // namespace dtrain::detail
