#include "data/pixels.h"

#include <cmath>
#include <string>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {

PixelNormalizer::PixelNormalizer(const DataSpec& spec, const at::Device& device) {
  const auto& mean = spec.pixel_mean;
  const auto& std = spec.pixel_std;
  if (mean.empty() && std.empty()) return;
  if (mean.size() != std.size() || spec.input_shape.empty() ||
      static_cast<int64_t>(mean.size()) != spec.input_shape[0])
    throw Error("pixel statistics need one mean and one std per channel: got " +
                std::to_string(mean.size()) + " means and " + std::to_string(std.size()) +
                " stds for samples of " + std::to_string(spec.input_shape.size()) + " dimensions");
  const int64_t c = static_cast<int64_t>(mean.size());
  at::Tensor scale = at::empty({c}, at::kFloat), shift = at::empty({c}, at::kFloat);
  for (int64_t i = 0; i < c; ++i) {
    const double s = std[static_cast<size_t>(i)];
    if (!(s > 0) || !std::isfinite(mean[static_cast<size_t>(i)]))
      throw Error("pixel statistics of channel " + std::to_string(i) + ": std must be > 0 and the mean finite");
    scale[i] = 1.0 / (255.0 * s);
    shift[i] = -mean[static_cast<size_t>(i)] / s;
  }
  scale_ = scale.to(device);
  shift_ = shift.to(device);
}

at::Tensor PixelNormalizer::operator()(const at::Tensor& inputs) const {
  if (!active() || inputs.scalar_type() != at::kByte) return inputs;
  if (inputs.dim() < 2 || inputs.size(1) != scale_.size(0))
    throw Error("uint8 inputs of shape " + shape_str(inputs.sizes().vec()) + " do not have the " +
                std::to_string(scale_.size(0)) + " channels (dimension 1) their pixel statistics describe");
  // (1, C, 1, ...): broadcast over the batch and the spatial dimensions.
  std::vector<int64_t> view(static_cast<size_t>(inputs.dim()), 1);
  view[1] = scale_.size(0);
  const at::Tensor x = inputs.to(at::kFloat);  // keeps channels-last strides
  return at::addcmul(shift_.view(view), x, scale_.view(view));
}

}  // namespace dtrain::detail
