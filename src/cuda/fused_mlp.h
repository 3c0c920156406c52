// Note [MLP GEMM epilogues]: GPT's MLP is y = c_proj(gelu_tanh(c_fc(x))). Eagerly the forward is
// the c_fc GEMM (bias in its epilogue), a GELU kernel that reads its (N, 4C) output and writes
// another, and the c_proj GEMM. cuBLASLt's GELU_AUX_BIAS epilogue computes gelu(x·Wᵀ + b) as the
// result leaves the c_fc GEMM and also stores the GELU's input (aux) for the backward: one kernel
// and one read of 100 MB per layer less for GPT-2 at B=16 (measured on an H200: the epilogue GEMM
// 0.158 ms against 0.115 + 0.070 for GEMM and GELU; +1.7% tokens/s for the step). The backward
// stays LibTorch's GEMMs, its GELU backward and dtrain's column sums for the c_fc bias gradient
// (into fp32): cuBLASLt's DGELU_BGRAD epilogue, which would fold both into the c_proj input-
// gradient GEMM, ran there as a generic non-tensor-core kernel, 0.32 ms per layer against 0.14
// ms for the three kernels it replaces. The GELU is cuBLASLt's tanh form, as GPT-2's.
// cuda/mlp.cpp holds the autograd function, cuda/blas_lt.cpp the GEMM; tests/gpu/test_mlp.cpp
// checks the output and every gradient against at::linear, at::gelu and at::linear.
#pragma once

#include <ATen/ATen.h>

namespace dtrain::detail {

// Whether fused_mlp handles these: a CUDA build, CUDA autocast on in fp16 or bf16, x (..., C) on
// CUDA, fc (4C', C) and proj (C, 4C') weights with their biases on x's device, widths multiples
// of 8.
bool fused_mlp_applies(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                       const at::Tensor& proj_weight, const at::Tensor& proj_bias);
// linear(gelu_tanh(linear(x, fc_weight, fc_bias)), proj_weight, proj_bias) in autocast's dtype,
// differentiable in all five (the c_fc bias gradient summed in fp32, as fused_linear's).
at::Tensor fused_mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                     const at::Tensor& proj_weight, const at::Tensor& proj_bias);

}  // namespace dtrain::detail
