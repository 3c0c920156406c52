#include "dtrain/optim.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

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

Optimizer::Optimizer(std::vector<at::Tensor> params, OptimizerOptions options,
                     std::vector<size_t> numbers, std::vector<bool> decays)
    : options_(std::move(options)),
      params_(std::move(params)),
      numbers_(std::move(numbers)),
      decays_(std::move(decays)) {
  const OptimizerOptions& o = options_;
  kind_ = o.kind;
  // The ranges are the schema's (one definition for configs and for C++ callers).
  Config::check_value("train.momentum", o.momentum);
  Config::check_value("train.dampening", o.dampening);
  Config::check_value("train.weight_decay", o.weight_decay);
  Config::check_value("train.beta1", o.beta1);
  Config::check_value("train.beta2", o.beta2);
  Config::check_value("train.eps", o.eps);
  if (kind_ == OptimizerKind::kSgd && o.nesterov && (o.momentum == 0 || o.dampening != 0))
    throw Error(
        "Nesterov momentum needs train.momentum > 0 and train.dampening 0 (as torch.optim.SGD), "
        "got "
        "momentum " +
            fmt_double(o.momentum) + " and dampening " + fmt_double(o.dampening),
        "train.nesterov");
  if (params_.empty()) throw Error("the optimizer got no parameters", "train.optimizer");
  if (numbers_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) numbers_.push_back(i);
  }
  if (numbers_.size() != params_.size() ||
      std::set<size_t>(numbers_.begin(), numbers_.end()).size() != numbers_.size())
    throw Error("the optimizer got " + std::to_string(numbers_.size()) + " state numbers for " +
                    std::to_string(params_.size()) + " parameters, or one number twice",
                "train.optimizer");
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
      not_fused_reason_ =
          device.is_cuda() ? "the parameters are not all on " + device.str()
                           : "the parameters are on " + device.str() + ", fused kernels need CUDA";
    } else if (!all_fp32) {
      not_fused_reason_ = "the parameters are not all fp32";
    } else {
      fused_ = true;
    }
  }
  capturable_ = fused_ && (kind_ == OptimizerKind::kSgd ? compat::kFusedSgdTakesTensorLr
                                                        : compat::kFusedAdamTakesTensorLr);

  // The no-decay rule (train.no_decay_norm_bias): parameters of fewer than 2 dimensions, unless
  // the caller said it per parameter.
  if (decays_.empty()) {
    for (const auto& p : params_) decays_.push_back(!(o.no_decay_norm_bias && p.dim() < 2));
  } else if (decays_.size() != params_.size()) {
    throw Error("the optimizer got " + std::to_string(decays_.size()) + " weight-decay flags for " +
                    std::to_string(params_.size()) + " parameters",
                "train.optimizer");
  }

  at::NoGradGuard no_grad;
  const size_t n = params_.size();
  if (kind_ == OptimizerKind::kSgd) {
    if (o.momentum != 0) {
      for (const auto& p : params_) momentum_.push_back(at::zeros_like(p));
      // With dampening the first step (buf = grad) differs from the others, so steps are counted.
      if (o.dampening != 0) host_steps_.assign(n, 0);
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
  // Two param groups as torch.optim would have them: decayed, and (no_decay_norm_bias) not.
  std::vector<size_t> decayed, undecayed;
  for (size_t i : live) (decays_[i] ? decayed : undecayed).push_back(i);
  for (const auto* group : {&decayed, &undecayed}) {
    if (group->empty()) continue;
    const double wd = group == &decayed ? options_.weight_decay : 0.0;
    if (fused_) {
      step_fused(*group, wd);
    } else {
      step_foreach(*group, lr, wd);
    }
  }
}

void Optimizer::step_fused(const std::vector<size_t>& group, double weight_decay) {
  const OptimizerOptions& o = options_;
  std::vector<at::Tensor> grads;
  grads.reserve(group.size());
  for (size_t i : group) grads.push_back(params_[i].grad());
  if (kind_ == OptimizerKind::kSgd) {
    compat::SgdArgs a;
    a.momentum = o.momentum;
    a.dampening = o.dampening;
    a.weight_decay = weight_decay;
    a.nesterov = o.nesterov;
    if (host_steps_.empty()) {
      const std::vector<at::Tensor> bufs = momentum_.empty()
                                               ? std::vector<at::Tensor>{}
                                               : pick(momentum_, group);  // none at momentum 0
      compat::fused_sgd(pick(params_, group), grads, bufs, lr_device_, lr_, a);
      return;
    }
    // Dampening: the parameters on their first step (buf = grad) in a launch of their own.
    std::vector<size_t> first, later;
    std::vector<at::Tensor> first_grads, later_grads;
    for (size_t k = 0; k < group.size(); ++k) {
      const size_t i = group[k];
      const bool is_first = host_steps_[i]++ == 0;
      (is_first ? first : later).push_back(i);
      (is_first ? first_grads : later_grads).push_back(grads[k]);
    }
    if (!later.empty())
      compat::fused_sgd(pick(params_, later), later_grads, pick(momentum_, later), lr_device_, lr_,
                        a);
    a.first_step = true;
    if (!first.empty())
      compat::fused_sgd(pick(params_, first), first_grads, pick(momentum_, first), lr_device_, lr_,
                        a);
    return;
  }
  const auto steps = pick(steps_, group);
  at::_foreach_add_(steps, 1);  // every step counter in one launch, before the kernel reads them
  compat::fused_adam(kind_ == OptimizerKind::kAdamW, pick(params_, group), grads,
                     pick(exp_avg_, group), pick(exp_avg_sq_, group), steps, lr_device_, lr_,
                     o.beta1, o.beta2, weight_decay, o.eps);
}

// torch.optim.SGD's foreach form: d = g + wd * p; with momentum, buf = g on a parameter's first
// step, else buf = momentum * buf + (1 - dampening) * d, and d = buf (Nesterov: d + momentum *
// buf); p -= lr * d. The buffers start at zero, so at dampening 0 the general rule gives the first
// step's buf = d exactly.
void Optimizer::sgd_foreach(const std::vector<size_t>& group, double lr, double weight_decay) {
  const OptimizerOptions& o = options_;
  const auto params = pick(params_, group);
  std::vector<at::Tensor> grads;
  grads.reserve(group.size());
  for (size_t i : group) grads.push_back(params_[i].grad());
  std::vector<at::Tensor> d =
      weight_decay != 0 ? at::_foreach_add(grads, params, weight_decay) : grads;
  if (o.momentum != 0) {
    auto bufs = pick(momentum_, group);
    std::vector<at::Tensor> first, first_d, later, later_d;
    for (size_t k = 0; k < group.size(); ++k) {
      const bool is_first = !host_steps_.empty() && host_steps_[group[k]]++ == 0;
      (is_first ? first : later).push_back(bufs[k]);
      (is_first ? first_d : later_d).push_back(d[k]);
    }
    if (!first.empty()) at::_foreach_add_(first, first_d);  // zeros + d: buf = d
    if (!later.empty()) {
      at::_foreach_mul_(later, o.momentum);
      at::_foreach_add_(later, later_d, 1.0 - o.dampening);
    }
    d = o.nesterov ? at::_foreach_add(d, bufs, o.momentum) : std::move(bufs);
  }
  at::_foreach_add_(params, d, -lr);
}

// The multi-tensor (foreach) forms of torch.optim's SGD and Adam(W) without capturable: step
// counts and bias corrections on the host.
void Optimizer::step_foreach(const std::vector<size_t>& group, double lr, double weight_decay) {
  if (kind_ == OptimizerKind::kSgd) {
    sgd_foreach(group, lr, weight_decay);
    return;
  }
  const OptimizerOptions& o = options_;
  const auto params = pick(params_, group);
  std::vector<at::Tensor> grads;
  grads.reserve(group.size());
  for (size_t i : group) grads.push_back(params_[i].grad());
  std::vector<at::Scalar> step_size, bias_correction2_sqrt;  // per parameter
  for (size_t i : group) {
    const double t = static_cast<double>(++host_steps_[i]);
    step_size.emplace_back(-(lr / (1.0 - std::pow(o.beta1, t))));
    bias_correction2_sqrt.emplace_back(std::sqrt(1.0 - std::pow(o.beta2, t)));
  }
  if (kind_ == OptimizerKind::kAdamW && weight_decay != 0) {
    at::_foreach_mul_(params, 1.0 - lr * weight_decay);  // decoupled: p *= 1 - lr * wd
  }
  const std::vector<at::Tensor> g = kind_ == OptimizerKind::kAdam && weight_decay != 0
                                        ? at::_foreach_add(grads, params, weight_decay)
                                        : grads;
  const auto exp_avgs = pick(exp_avg_, group);
  const auto exp_avg_sqs = pick(exp_avg_sq_, group);
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
  const OptimizerOptions& o = options_;
  if (kind_ == OptimizerKind::kSgd && o.momentum != 0) {
    s += " (" + std::string(o.nesterov ? "Nesterov " : "") + "momentum " + fmt_double(o.momentum) +
         (o.dampening != 0 ? ", dampening " + fmt_double(o.dampening) : "") + ")";
  }
  if (o.weight_decay != 0 && o.no_decay_norm_bias) {
    size_t undecayed = 0;
    for (bool d : decays_) undecayed += d ? 0 : 1;
    s += ", no weight decay on " + std::to_string(undecayed) + " of " +
         std::to_string(params_.size()) + " parameters (fewer than 2 dimensions)";
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
  auto num = [&](size_t i) { return std::to_string(numbers_[i]); };
  for (size_t i = 0; i < momentum_.size(); ++i)
    out.emplace_back("momentum." + num(i), momentum_[i]);
  if (kind_ == OptimizerKind::kSgd) {  // step counts only with dampening
    for (size_t i = 0; i < host_steps_.size(); ++i)
      out.emplace_back("step." + num(i),
                       at::scalar_tensor(static_cast<double>(host_steps_[i]), at::kFloat));
  }
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    out.emplace_back("exp_avg." + num(i), exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + num(i), exp_avg_sq_[i]);
    out.emplace_back(
        "step." + num(i),
        fused_ ? steps_[i] : at::scalar_tensor(static_cast<double>(host_steps_[i]), at::kFloat));
  }
  return out;
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto* ts : {&momentum_, &exp_avg_, &exp_avg_sq_, &steps_})
    for (const auto& t : *ts) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
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
    if (kv.first.rfind("step.", 0) == 0 && steps_.empty()) kv.second = at::Tensor();
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
      const size_t number = std::stoul(kv.first.substr(5));
      const size_t i = static_cast<size_t>(std::find(numbers_.begin(), numbers_.end(), number) -
                                           numbers_.begin());
      host_steps_[i] = static_cast<int64_t>(src.item<double>());
    }
  }
}

}  // namespace dtrain
