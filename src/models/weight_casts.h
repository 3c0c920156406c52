// WeightCasts: a model's weights cast to autocast's dtype in one multi-tensor copy before its
// forward pass, each cast's gradient flowing back to its weight (Note [weight casts]).
#pragma once

#include <ATen/ATen.h>

#include <unordered_map>
#include <vector>

namespace dtrain::detail {

class WeightCasts {
 public:
  // Casts each floating-point weight on `device` whose dtype is not autocast's when autocast is
  // on for the device; with autocast off (or nothing to cast) holds nothing. Under grad mode a
  // cast of a weight that requires grad requires grad itself: its gradient reaches the weight
  // cast to the weight's dtype, as autocast's own cast does.
  WeightCasts(const std::vector<at::Tensor>& weights, const at::Device& device);
  WeightCasts() = default;

  // The cast of `weight`, or `weight` itself where there is none.
  const at::Tensor& operator()(const at::Tensor& weight) const;
  size_t size() const { return casts_.size(); }

 private:
  std::unordered_map<const c10::TensorImpl*, at::Tensor> casts_;
};

}  // namespace dtrain::detail
