#include "data/pixels.h"

#include <array>
#include <cmath>
#include <string>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {

std::pair<std::vector<double>, std::vector<double>> pixel_statistics(const at::Tensor& pixels) {
  if (pixels.scalar_type() != at::kByte || pixels.dim() < 2)
    throw Error("pixel statistics need uint8 pixels (N, C, ...)");
  const at::Tensor p = pixels.contiguous();
  const int64_t n = p.size(0), channels = p.size(1), plane = n > 0 ? p.numel() / (n * channels) : 0;
  std::vector<std::array<int64_t, 256>> hist(static_cast<size_t>(channels));
  for (auto& h : hist) h.fill(0);
  const uint8_t* data = p.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels; ++c) {
      auto& h = hist[static_cast<size_t>(c)];
      const uint8_t* q = data + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) ++h[q[j]];
    }
  std::vector<double> mean(hist.size()), stdev(hist.size());
  const double count = static_cast<double>(n * plane);
  for (size_t c = 0; c < hist.size(); ++c) {
    double sum = 0, sq = 0;
    for (int v = 0; v < 256; ++v)
      sum += static_cast<double>(hist[c][static_cast<size_t>(v)]) * (v / 255.0);
    mean[c] = sum / count;
    for (int v = 0; v < 256; ++v) {
      const double d = v / 255.0 - mean[c];
      sq += static_cast<double>(hist[c][static_cast<size_t>(v)]) * d * d;
    }
    stdev[c] = std::sqrt(sq / count);
  }
  return {mean, stdev};
}

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
      throw Error("pixel statistics of channel " + std::to_string(i) +
                  ": std must be > 0 and the mean finite");
    scale[i] = 1.0 / (255.0 * s);
    shift[i] = -mean[static_cast<size_t>(i)] / s;
  }
  scale_ = scale.to(device);
  shift_ = shift.to(device);
}

namespace {

// (1, C, 1, ...): a per-channel vector broadcast over the batch and the spatial dimensions.
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& inputs) {
  if (inputs.dim() < 2 || inputs.size(1) != v.size(0))
    throw Error("uint8 inputs of shape " + shape_str(inputs.sizes().vec()) + " do not have the " +
                std::to_string(v.size(0)) +
                " channels (dimension 1) their pixel statistics describe");
  std::vector<int64_t> view(static_cast<size_t>(inputs.dim()), 1);
  view[1] = v.size(0);
  return v.view(view);
}

}  // namespace

at::Tensor PixelNormalizer::operator()(const at::Tensor& inputs) const {
  if (!active() || inputs.scalar_type() != at::kByte) return inputs;
  const at::Tensor x = inputs.to(at::kFloat);  // keeps channels-last strides
  return at::addcmul(per_channel(shift_, inputs), x, per_channel(scale_, inputs));
}

at::Tensor PixelNormalizer::operator()(const at::Tensor& inputs, at::ScalarType dtype,
                                       at::MemoryFormat layout) const {
  if (!active() || inputs.scalar_type() != at::kByte) return inputs;
  if (dtype == at::kFloat && layout == at::MemoryFormat::Contiguous) return (*this)(inputs);
  // On CUDA one kernel: the uint8 values promoted to float, shift + x * scale in float as above,
  // the result cast to `dtype` as it is written. ATen's CPU kernel casts no operand on the fly.
  if (!inputs.is_cuda()) return (*this)(inputs).to(dtype).contiguous(layout);
  at::Tensor out = at::empty(inputs.sizes(), inputs.options().dtype(dtype).memory_format(layout));
  at::addcmul_out(out, per_channel(shift_, inputs), inputs, per_channel(scale_, inputs));
  return out;
}

}  // namespace dtrain::detail
