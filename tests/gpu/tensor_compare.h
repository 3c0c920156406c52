// What the kernel tests of the gpu tier share: the GPU, and the relative difference of two
// tensors (max |a - b| over max |b|, in double).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

namespace dtrain::test {

inline const at::Device kGpu(at::kCUDA, 0);

inline double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
  return (x - y).abs().max().item<double>() / std::max(1e-12, y.abs().max().item<double>());
}

}  // namespace dtrain::test
