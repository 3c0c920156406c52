// Gradient clipping by global norm.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace dtrain::detail {

// Scales the gradients so that their global 2-norm is at most max_norm (PyTorch's
// clip_grad_norm_ rule, eps 1e-6), without reading the norm on the host: capturable in a CUDA
// graph. Parameters without a gradient are skipped.
void clip_gradients(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace dtrain::detail
