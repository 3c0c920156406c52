#include "dtrain/amp.h"

#include <ATen/autocast_mode.h>

#include <cmath>

#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "util/torch_compat.h"

namespace dtrain {

bool autocast_supported(const at::Device& device, Precision precision) {
  if (precision == Precision::kFp32) return false;
  if (device.is_cuda()) return true;
  // CPU autocast: bf16 in every version; fp16 only from 2.x.
  return precision == Precision::kBf16 || compat::kHasCpuFp16Autocast;
}

std::string autocast_slowdown(const at::Device& device, Precision precision) {
  if (device.is_cuda() || precision != Precision::kBf16 || !autocast_supported(device, precision))
    return "";
  if (__builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16")) return "";
  return "train.precision bf16 on this CPU, which has no bf16 instructions (AVX512-BF16, "
         "AMX-BF16): "
         "every bf16 operation is converted in software, about 6x slower than fp32 for a ResNet; "
         "train.precision=fp32 is faster here";
}

AutocastGuard::AutocastGuard(const at::Device& device, Precision precision) : type_(device.type()) {
  if (!autocast_supported(device, precision)) return;
  active_ = true;
  prev_enabled_ = compat::autocast_enabled(type_);
  compat::set_autocast(type_, true, precision == Precision::kBf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost region drops autocast's cache of casted weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast(type_, prev_enabled_, at::kBFloat16);
}

GradScaler::GradScaler(const at::Device& device, ScalerOptions options) : options_(options) {
  auto f = at::TensorOptions().device(device).dtype(at::kFloat);
  scale_ = at::full({1}, options.init_scale, f);
  growth_tracker_ = at::zeros({1}, f.dtype(at::kInt));
  found_inf_ = at::zeros({1}, f);
}

void GradScaler::unscale(const std::vector<at::Tensor>& params, Communicator* across) {
  found_inf_.zero_();
  at::Tensor inv = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) {
    if (scale_.is_cuda() || compat::kHasCpuAmpScalerOps) {
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv);
    } else {
      // LibTorch 1.13 has no CPU kernel for the scaler ops: the same computation with plain ops.
      for (auto& g : grads) {
        if (!at::isfinite(g).all().item<bool>()) found_inf_.fill_(1.0);
        g.mul_(inv.to(g.scalar_type()));
      }
    }
  }
  if (across != nullptr) across->all_reduce(found_inf_, ReduceOp::kMax);
}

bool GradScaler::found_inf() const { return found_inf_.item<float>() > 0; }

void GradScaler::update() {
  if (scale_.is_cuda() || compat::kHasCpuAmpScalerOps) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                           options_.backoff_factor, options_.growth_interval);
    return;
  }
  // PyTorch's rule: on inf, scale *= backoff and the tracker resets; otherwise the tracker
  // counts clean steps and the scale grows by `growth` once it reaches the interval.
  if (found_inf_.item<float>() > 0) {
    scale_.mul_(options_.backoff_factor);
    growth_tracker_.zero_();
  } else {
    const int64_t t = growth_tracker_.item<int>() + 1;
    if (t == options_.growth_interval) {
      const double grown = scale_.item<float>() * options_.growth_factor;
      if (std::isfinite(static_cast<float>(grown))) scale_.fill_(grown);  // never to inf
      growth_tracker_.zero_();
    } else {
      growth_tracker_.fill_(t);
    }
  }
}

double GradScaler::current_scale() const { return scale_.item<float>(); }
int64_t GradScaler::growth_tracker() const { return growth_tracker_.item<int>(); }

std::vector<std::pair<std::string, at::Tensor>> GradScaler::state() const {
  return {{"scale", scale_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)},
          {"growth_tracker", growth_tracker_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)}};
}

void GradScaler::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  at::Tensor scale, tracker;
  for (const auto& [name, t] : state) {
    if (name == "scale")
      scale = t;
    else if (name == "growth_tracker")
      tracker = t;
    else
      throw Error("loss scaler state: unexpected entry '" + name + "'");
  }
  for (const auto& [name, t] :
       {std::pair<const char*, at::Tensor>{"scale", scale}, {"growth_tracker", tracker}})
    if (!t.defined() || t.numel() != 1)
      throw Error(std::string("loss scaler state: '") + name + "' is missing or not one value");
  scale_.fill_(scale.item<double>());
  growth_tracker_.fill_(tracker.item<int64_t>());
}

}  // namespace dtrain
