// PixelNormalizer: turns a batch of uint8 pixels into the model's standardized float inputs on
// the device (Note [uint8 pixels] in dtrain/data/dataset.h). Built once per run from the data's
// spec; a spec without pixel statistics gives an identity.
#pragma once

#include <ATen/ATen.h>

#include "dtrain/data/dataset.h"

namespace dtrain::detail {

class PixelNormalizer {
 public:
  PixelNormalizer() = default;  // identity
  PixelNormalizer(const DataSpec& spec, const at::Device& device);
  bool active() const { return scale_.defined(); }
  // uint8 (N, C, ...) -> float (N, C, ...), x * (1 / (255 std[c])) - mean[c] / std[c], keeping
  // the memory format; any other dtype is returned as it is.
  at::Tensor operator()(const at::Tensor& inputs) const;

 private:
  at::Tensor scale_, shift_;  // (C,) float on the device
};

}  // namespace dtrain::detail
