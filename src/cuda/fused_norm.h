// Note [fused residual LayerNorm]: GPT's blocks add each sub-layer's output to the residual
// stream and normalize the sum for the next sub-layer: s = x + r; y = layer_norm(s). Under bf16
// autocast that is, in LibTorch's ops, an add (fp32 x + bf16 r), an fp32 LayerNorm (autocast runs
// it in fp32) and a cast of its output to bf16 for the next GEMM, each a full pass over the
// activations, and the same again in the backward. On CUDA dtrain does it in one kernel each way
// (cuda/layer_norm.cu): s in fp32 and y directly in the autocast dtype, the backward adding the
// gradient that reaches s from later layers. The values are those of the unfused ops computed
// in fp32 (y rounded once to its dtype); tests/gpu checks outputs and gradients against them.
#pragma once

#include <ATen/ATen.h>

#include <utility>

namespace dtrain::detail {

// Whether fused_residual_layer_norm handles these tensors: a CUDA build; x fp32, contiguous, on
// CUDA, last dimension C with 2 <= C <= 6144; weight and bias fp32 (C,); r undefined or x's shape
// in fp32, fp16 or bf16.
bool fused_layer_norm_applies(const at::Tensor& x, const at::Tensor& r, const at::Tensor& weight,
                              const at::Tensor& bias);
// (s, y): s = x + r (x itself when r is undefined), y = layer_norm(s) over the last dimension
// with weight, bias and eps, in the autocast dtype when CUDA autocast is on (else fp32).
// Differentiable in x, r, weight and bias.
std::pair<at::Tensor, at::Tensor> fused_residual_layer_norm(const at::Tensor& x,
                                                            const at::Tensor& r,
                                                            const at::Tensor& weight,
                                                            const at::Tensor& bias, double eps);

}  // namespace dtrain::detail
