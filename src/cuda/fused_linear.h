// Note [Linear bias gradient]: a Linear layer's bias gradient is the sum of its output gradient
// over every row (16k rows of GPT-2 activations). LibTorch's backward computes it with its generic
// reduction in the activations' dtype and then casts it to the fp32 bias: 49 such sums took 1.8
// ms of a 32 ms GPT-2 step on an H200, against 0.4 ms in the kernels torch.compile generates.
// dtrain's Linear on CUDA (cuda/linear.cpp) runs the same GEMMs as at::linear forward and
// backward and sums the bias gradient with its own column-sum kernel (cuda/column_sum.cu),
// straight into fp32; an fp32 weight's gradient is written as fp32 by its GEMM (at::mm's
// out_dtype, LibTorch 2.8 on), in place of a bf16 product and a cast kernel per weight (48 of them
// a GPT-2 step). tests/gpu checks values and gradients against at::linear.
#pragma once

#include <ATen/ATen.h>

namespace dtrain::detail {

// Whether fused_linear handles these: a CUDA build; x on CUDA with its last dimension equal to
// the weight's second; weight (out, in) and bias (out,) fp32, fp16 or bf16 on x's device.
bool fused_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
// at::linear(x, weight, bias) in autocast's dtype while CUDA autocast is on (else the weight's),
// differentiable in all three.
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
// The fp32 sums over rows of a contiguous (rows, cols) CUDA matrix of fp32, fp16 or bf16: a
// Linear's bias gradient from its output gradient.
at::Tensor column_sums(const at::Tensor& dy);
// The gradient dyᵀ·x of a weight of type w_type, in that type (fp32: from the GEMM itself).
at::Tensor weight_gradient(const at::Tensor& dy_t, const at::Tensor& x, at::ScalarType w_type);

}  // namespace dtrain::detail
