#include "dtrain/optim.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <map>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "util/format.h"
#include "util/torch_compat.h"

namespace dtrain {

namespace {

std::string fmt_double(double v) { return detail::format("%g", v); }
std::string shape_of(const at::Tensor& t) { return detail::shape_str(t.sizes().vec()); }

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& all, const std::vector<size_t>& idx) {
  std::vector<at::Tensor> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(all[i]);
  return out;
}

}  // namespace

Optimizer::Optimizer(std::vector<at::Tensor> params, OptimizerOptions options)
    : options_(std::move(options)), params_(std::move(params)) {
  const OptimizerOptions& o = options_;
  kind_ = o.kind;
  // The ranges are the schema's (one definition for configs and for C++ callers).
  Config::check_value("train.momentum", o.momentum);
  Config::check_value("train.weight_decay", o.weight_decay);
  Config::check_value("train.beta1", o.beta1);
  Config::check_value("train.beta2", o.beta2);
  Config::check_value("train.eps", o.eps);
  if (params_.empty()) throw Error("the optimizer got no parameters", "train.optimizer");
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined() || !at::isFloatingType(params_[i].scalar_type())) {
      throw Error("parameter " + std::to_string(i) + " is not a floating-point tensor",
                  "train.optimizer");
    }
  }

  // Fused kernels: one launch per step over every parameter, which must share one CUDA device
  // and be fp32 (the state and the tensor learning rate live there too).
  const bool kernel_exists = kind_ == OptimizerKind::kSgd    ? compat::kHasFusedSgd
                             : kind_ == OptimizerKind::kAdam ? compat::kHasFusedAdam
                                                    : compat::kHasFusedAdamW;
  const at::Device device = params_[0].device();
  bool one_cuda_device = true, all_fp32 = true;
  for (const auto& p : params_) {
    one_cuda_device = one_cuda_device && p.is_cuda() && p.device() == device;
    all_fp32 = all_fp32 && p.scalar_type() == at::kFloat;
  }
  if (o.fused) {
    if (!kernel_exists) {
      not_fused_reason_ = "LibTorch " + compat::libtorch_version() + " has no fused kernel for it";
    } else if (!one_cuda_device) {
      not_fused_reason_ = device.is_cuda() ? "the parameters are not all on " + device.str()
                                           : "the parameters are on " + device.str() +
                                                 ", fused kernels need CUDA";
    } else if (!all_fp32) {
      not_fused_reason_ = "the parameters are not all fp32";
    } else {
      fused_ = true;
    }
  }
  capturable_ = fused_ && (kind_ == OptimizerKind::kSgd ? compat::kFusedSgdTakesTensorLr
                                                : compat::kFusedAdamTakesTensorLr);

  at::NoGradGuard no_grad;
  const size_t n = params_.size();
  if (kind_ == OptimizerKind::kSgd) {
    if (o.momentum != 0) {
      for (const auto& p : params_) momentum_.push_back(at::zeros_like(p));
    }
  } else {
    for (const auto& p : params_) {
      exp_avg_.push_back(at::zeros_like(p));
      exp_avg_sq_.push_back(at::zeros_like(p));
    }
    if (fused_) {
      for (const auto& p : params_) {
        steps_.push_back(at::scalar_tensor(0.0, p.options().dtype(at::kFloat)));
      }
    } else {
      host_steps_.assign(n, 0);
    }
  }
  if (capturable_) lr_device_ = at::scalar_tensor(0.0, params_[0].options().dtype(at::kFloat));
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0)) throw Error("learning rate must be >= 0, got " + fmt_double(lr), "train.lr");
  if (lr == lr_) return;
  lr_ = lr;
  if (lr_device_.defined()) lr_device_.fill_(lr);
}

void Optimizer::step(double lr) {
  set_lr(lr);
  std::vector<size_t> live;  // parameters with a gradient this step
  live.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) live.push_back(i);
  }
  if (live.empty()) return;
  at::NoGradGuard no_grad;
  if (fused_) {
    step_fused(live);
  } else {
    step_foreach(live, lr);
  }
}

void Optimizer::step_fused(const std::vector<size_t>& live) {
  const auto params = pick(params_, live);
  std::vector<at::Tensor> grads;
  grads.reserve(live.size());
  for (size_t i : live) grads.push_back(params_[i].grad());
  const OptimizerOptions& o = options_;
  if (kind_ == OptimizerKind::kSgd) {
    const std::vector<at::Tensor> bufs =
        momentum_.empty() ? std::vector<at::Tensor>{} : pick(momentum_, live);  // none at momentum 0
    compat::fused_sgd(params, grads, bufs, lr_device_, lr_, o.momentum, o.weight_decay);
    return;
  }
  const auto steps = pick(steps_, live);
  at::_foreach_add_(steps, 1);  // every step counter in one launch, before the kernel reads them
  compat::fused_adam(kind_ == OptimizerKind::kAdamW, params, grads, pick(exp_avg_, live), pick(exp_avg_sq_, live),
             steps, lr_device_, lr_, o.beta1, o.beta2, o.weight_decay, o.eps);
}

// The multi-tensor (foreach) forms of torch.optim's SGD and Adam(W) without capturable: step
// counts and bias corrections on the host.
void Optimizer::step_foreach(const std::vector<size_t>& live, double lr) {
  const OptimizerOptions& o = options_;
  const auto params = pick(params_, live);
  std::vector<at::Tensor> grads;
  grads.reserve(live.size());
  for (size_t i : live) grads.push_back(params_[i].grad());

  if (kind_ == OptimizerKind::kSgd) {
    // d = g + wd * p; with momentum: buf = momentum * buf + d (buf starts at zero, so the first
    // step gives buf = d exactly), d = buf; p -= lr * d.
    std::vector<at::Tensor> d =
        o.weight_decay != 0 ? at::_foreach_add(grads, params, o.weight_decay) : grads;
    if (o.momentum != 0) {
      auto bufs = pick(momentum_, live);
      at::_foreach_mul_(bufs, o.momentum);
      at::_foreach_add_(bufs, d);
      d = std::move(bufs);
    }
    at::_foreach_add_(params, d, -lr);
    return;
  }

  std::vector<at::Scalar> step_size, bias_correction2_sqrt;  // per parameter
  for (size_t i : live) {
    const double t = static_cast<double>(++host_steps_[i]);
    step_size.emplace_back(-(lr / (1.0 - std::pow(o.beta1, t))));
    bias_correction2_sqrt.emplace_back(std::sqrt(1.0 - std::pow(o.beta2, t)));
  }
  if (kind_ == OptimizerKind::kAdamW && o.weight_decay != 0) {
    at::_foreach_mul_(params, 1.0 - lr * o.weight_decay);  // decoupled: p *= 1 - lr * wd
  }
  const std::vector<at::Tensor> g = kind_ == OptimizerKind::kAdam && o.weight_decay != 0
                                        ? at::_foreach_add(grads, params, o.weight_decay)
                                        : grads;
  const auto exp_avgs = pick(exp_avg_, live);
  const auto exp_avg_sqs = pick(exp_avg_sq_, live);
  at::_foreach_mul_(exp_avgs, o.beta1);
  at::_foreach_add_(exp_avgs, g, 1.0 - o.beta1);
  at::_foreach_mul_(exp_avg_sqs, o.beta2);
  at::_foreach_addcmul_(exp_avg_sqs, g, g, 1.0 - o.beta2);
  // p += -(lr / bc1) * exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps)
  std::vector<at::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denom, at::ArrayRef<at::Scalar>(bias_correction2_sqrt));
  at::_foreach_add_(denom, o.eps);
  at::_foreach_addcdiv_(params, exp_avgs, denom, at::ArrayRef<at::Scalar>(step_size));
}

std::string Optimizer::describe() const {
  std::string s = kind_ == OptimizerKind::kSgd    ? "SGD"
                  : kind_ == OptimizerKind::kAdam ? "Adam"
                                         : "AdamW";
  if (kind_ == OptimizerKind::kSgd && options_.momentum != 0) {
    s += " (momentum " + fmt_double(options_.momentum) + ")";
  }
  if (fused_) {
    s += ", fused CUDA kernel";
    if (!capturable_) {
      s += " (learning rate passed by value: this LibTorch has no tensor-lr overload, so a step "
           "cannot be captured in a CUDA graph)";
    }
  } else {
    s += ", multi-tensor (foreach)";
    if (!not_fused_reason_.empty()) s += "; not fused: " + not_fused_reason_;
  }
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < momentum_.size(); ++i) {
    out.emplace_back("momentum." + std::to_string(i), momentum_[i]);
  }
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    const std::string n = std::to_string(i);
    out.emplace_back("exp_avg." + n, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + n, exp_avg_sq_[i]);
    out.emplace_back("step." + n, fused_ ? steps_[i]
                                         : at::scalar_tensor(static_cast<double>(host_steps_[i]),
                                                             at::kFloat));
  }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::map<std::string, at::Tensor> given;
  for (const auto& kv : state) {
    if (!given.emplace(kv.first, kv.second).second) {
      throw Error("optimizer state has entry '" + kv.first + "' twice");
    }
  }
  // (name, this optimizer's tensor) for every entry this optimizer expects; the tensor is
  // undefined for step counts kept on the host.
  std::vector<std::pair<std::string, at::Tensor>> expected = this->state();
  for (auto& kv : expected) {
    if (kv.first.rfind("step.", 0) == 0 && !fused_) kv.second = at::Tensor();
  }
  const std::string what = describe();
  for (const auto& kv : expected) {
    auto it = given.find(kv.first);
    if (it == given.end()) {
      throw Error("optimizer state has no entry '" + kv.first + "' (" + what + ", " +
                  std::to_string(params_.size()) + " parameters)");
    }
    const at::Tensor& t = it->second;
    if (!t.defined()) throw Error("optimizer state entry '" + kv.first + "' is undefined");
    if (kv.first.rfind("step.", 0) == 0) {
      if (t.numel() != 1) {
        throw Error("optimizer state entry '" + kv.first + "' has shape " + shape_of(t) +
                    ", expected one value");
      }
      const double v = t.item<double>();
      if (!(v >= 0) || v != std::floor(v)) {
        throw Error("optimizer state entry '" + kv.first + "' is " + fmt_double(v) +
                    ", expected a step count");
      }
    } else if (t.sizes() != kv.second.sizes()) {
      throw Error("optimizer state entry '" + kv.first + "' has shape " + shape_of(t) +
                  ", expected " + shape_of(kv.second));
    }
  }
  if (given.size() != expected.size()) {
    for (const auto& kv : given) {
      bool known = false;
      for (const auto& e : expected) known = known || e.first == kv.first;
      if (!known) {
        throw Error("optimizer state has unexpected entry '" + kv.first + "' (" + what + ", " +
                    std::to_string(params_.size()) + " parameters)");
      }
    }
  }
  // Everything checked: copy.
  at::NoGradGuard no_grad;
  for (const auto& kv : expected) {
    const at::Tensor& src = given.at(kv.first);
    if (kv.second.defined()) {
      kv.second.copy_(src.reshape(kv.second.sizes()));
    } else {
      const size_t i = std::stoul(kv.first.substr(5));
      host_steps_[i] = static_cast<int64_t>(src.item<double>());
    }
  }
}

}  // namespace dtrain
