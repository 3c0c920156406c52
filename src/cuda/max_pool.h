// Note [max-pool kernels]: ResNet's stem max-pools (3x3, stride 2, padding 1) the largest
// activation of the network. LibTorch's channels-last max_pool2d writes int64 indices (four times
// the output's bytes in bf16) and its backward zero-fills the input's gradient and scatters into
// it: on an H100 the pair took 1.34 ms of a 24 ms ResNet-50 step at batch 128, several times the
// bytes' cost. dtrain's kernels (cuda/max_pool.cu) keep the window position of each maximum in one
// byte, and the backward gathers: each input element sums the gradients of the windows whose
// maximum it is, so nothing is filled or scattered. Maxima, ties (the first in the window's row
// order) and NaN (it wins) are as torch.nn.functional.max_pool2d's, so the gradient goes to the
// same element; tests/gpu/test_max_pool.cpp checks it against ATen.
#pragma once

#include <ATen/ATen.h>

namespace dtrain::detail {

// Whether max_pool handles x: a CUDA build; x 4-d (N, C, H, W) channels-last contiguous on CUDA
// in fp32, fp16 or bf16; a square window 1 <= kernel <= 15, stride >= 1, 0 <= padding <=
// kernel / 2 and an output of at least one element (dilation 1, floor mode).
bool max_pool_applies(const at::Tensor& x, int kernel, int stride, int padding);

// at::max_pool2d(x, kernel, stride, padding) in x's dtype and layout, differentiable in x.
at::Tensor max_pool(const at::Tensor& x, int kernel, int stride, int padding);

}  // namespace dtrain::detail
