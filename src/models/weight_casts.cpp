// Note [weight casts]:
// Under autocast each convolution casts its fp32 weight to bf16 (or fp16) as it runs: a kernel
// per weight each forward pass (53 for ResNet-50), besides autograd's cast of each gradient back.
// ResNet's forward pass casts all its convolutions' weights first, in one multi-tensor copy
// (compat::copy_each, a launch or two), and each convolution takes its weight's cast; autocast
// then finds the weight in its dtype and casts nothing. Each cast's gradient reaches its weight
// through CastBackward, which casts it to fp32 as autocast's cast (ToCopyBackward) does, so the
// weights' gradients, their hooks and the order they come in are unchanged. The casts live as
// long as autocast's would: the forward pass holds them, each convolution's backward keeps its own.
// A block run again by activation checkpointing (in backward, maybe on another thread) has no
// casts at hand and takes autocast's path.
#include "models/weight_casts.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <memory>
#include <string>

#include "util/torch_compat.h"

namespace dtrain::detail {

namespace {

// The gradient of a weight's cast, cast back to the weight's dtype.
struct CastBackward final : torch::autograd::Node {
  explicit CastBackward(at::ScalarType dtype) : dtype_(dtype) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::autograd::variable_list out(1);
    if (grads[0].defined()) out[0] = grads[0].to(dtype_);
    return out;
  }
  std::string name() const override { return "dtrain::WeightCastBackward"; }

 private:
  at::ScalarType dtype_;
};

}  // namespace

WeightCasts::WeightCasts(const std::vector<at::Tensor>& weights, const at::Device& device) {
  if (!compat::autocast_enabled(device.type())) return;
  const at::ScalarType dtype = compat::autocast_dtype(device.type());
  // One launch needs one source dtype: the weights in another are left to autocast.
  std::vector<at::Tensor> from, to;
  for (const auto& w : weights) {
    if (!w.defined() || w.device() != device || w.scalar_type() != at::kFloat) continue;
    if (casts_.count(w.unsafeGetTensorImpl())) continue;
    from.push_back(w);
    to.push_back(at::empty_like(w, w.options().dtype(dtype)));  // the weight's strides
    casts_.emplace(w.unsafeGetTensorImpl(), to.back());
  }
  if (from.empty()) return;
  {
    at::NoGradGuard no_grad;  // the copies themselves are not recorded; CastBackward stands in
    compat::copy_each(to, from);
  }
  if (!torch::autograd::GradMode::is_enabled()) return;
  for (size_t i = 0; i < from.size(); ++i) {
    if (!from[i].requires_grad()) continue;
    auto node = std::shared_ptr<CastBackward>(new CastBackward(from[i].scalar_type()),
                                              torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(from[i]));
    torch::autograd::set_history(to[i], node);
  }
}

const at::Tensor& WeightCasts::operator()(const at::Tensor& weight) const {
  const auto it = casts_.find(weight.unsafeGetTensorImpl());
  return it == casts_.end() ? weight : it->second;
}

}  // namespace dtrain::detail
