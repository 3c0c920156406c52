// PixelNormalizer: turns a batch of uint8 pixels into the model's standardized float inputs on
// the device (Note [uint8 pixels] in dtrain/data/dataset.h). Built once per run from the data's
// spec; a spec without pixel statistics gives an identity. pixel_statistics: the train split's
// per-channel mean and std that data.normalize standardizes with.
#pragma once

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "dtrain/data/dataset.h"

namespace dtrain::detail {

// Per-channel mean and population std of uint8 pixels (N, C, ...) scaled to [0, 1], exact: from
// each channel's histogram of the 256 values, summed in double. The same on any number of
// threads or ranks, so that a run's preprocess.json does not depend on how it was launched.
std::pair<std::vector<double>, std::vector<double>> pixel_statistics(const at::Tensor& pixels);

class PixelNormalizer {
 public:
  PixelNormalizer() = default;  // identity
  PixelNormalizer(const DataSpec& spec, const at::Device& device);
  bool active() const { return scale_.defined(); }
  // uint8 (N, C, ...) -> float (N, C, ...), x * (1 / (255 std[c])) - mean[c] / std[c], keeping
  // the memory format; any other dtype is returned as it is.
  at::Tensor operator()(const at::Tensor& inputs) const;
  // The same written in one pass into `dtype` (float, bf16 or fp16: the float values rounded
  // once) and `layout`.
  at::Tensor operator()(const at::Tensor& inputs, at::ScalarType dtype,
                        at::MemoryFormat layout) const;

 private:
  at::Tensor scale_, shift_;  // (C,) float on the device
};

}  // namespace dtrain::detail
