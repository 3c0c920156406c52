#include "train/weight_average.h"

#include <algorithm>

namespace dtrain::detail {

double ema_decay_per_update(const TrainConfig& t) {
  // torchvision: adjust = world_size * batch_size * model_ema_steps / epochs, alpha = 1 - decay.
  const double adjust = static_cast<double>(t.global_batch) * static_cast<double>(t.ema_every) /
                        static_cast<double>(std::max<int64_t>(1, t.epochs));
  const double alpha = std::min(1.0, (1.0 - t.ema_decay) * adjust);
  return 1.0 - alpha;
}

WeightAverage::WeightAverage(Model& model, const TrainConfig& t)
    : model_(model),
      decay_(ema_decay_per_update(t)),
      every_(std::max<int64_t>(1, t.ema_every)),
      warmup_(t.ema_warmup_steps < 0 ? t.warmup_steps : t.ema_warmup_steps) {
  at::NoGradGuard no_grad;
  const auto add = [&](const std::string& name, const at::Tensor& v) {
    (v.is_floating_point() ? floating_ : integral_).push_back(current_.size());
    names_.push_back(name);
    current_.push_back(v);
    average_.push_back(v.detach().clone());
  };
  for (const auto& p : model.named_parameters()) add(p.key(), p.value());
  for (const auto& b : model.named_buffers()) add(b.key(), b.value());
}

void WeightAverage::after_step(int64_t steps_done) {
  if (steps_done % every_ != 0) return;
  at::NoGradGuard no_grad;
  // Swapped (an evaluation of the average in progress) the model's values sit in average_.
  const std::vector<at::Tensor>& model = swapped_ ? average_ : current_;
  const std::vector<at::Tensor>& avg = swapped_ ? current_ : average_;
  std::vector<at::Tensor> a, m;
  for (const size_t i : floating_) a.push_back(avg[i]), m.push_back(model[i].detach());
  if (updates_ == 0) {
    for (size_t i = 0; i < a.size(); ++i) a[i].copy_(m[i]);
  } else {
    // AveragedModel's ema_avg: decay * avg + (1 - decay) * model, each product rounded.
    at::_foreach_mul_(a, decay_);
    at::_foreach_add_(a, at::_foreach_mul(m, 1.0 - decay_));
  }
  for (const size_t i : integral_) avg[i].copy_(model[i]);
  ++updates_;
  if (steps_done <= warmup_) updates_ = 0;  // still warming up: the next update copies again
}

void WeightAverage::swap() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < current_.size(); ++i) {
    const at::Tensor held = current_[i].detach().clone();
    current_[i].detach().copy_(average_[i]);
    average_[i].copy_(held);
  }
  swapped_ = !swapped_;
}

void WeightAverage::restart() {
  at::NoGradGuard no_grad;
  if (swapped_) swap();
  for (size_t i = 0; i < current_.size(); ++i) average_[i].copy_(current_[i].detach());
  updates_ = 0;
}

void evaluate_average(WeightAverage& ema, bool ema_output, EvalRecord& rec,
                      const std::function<EvalResult()>& evaluate_swapped) {
  const EvalResult model = rec.result;
  ema.swap();
  const EvalResult average = evaluate_swapped();
  rec.result = ema_output ? average : model;
  rec.other = ema_output ? model : average;
  rec.weights = ema_output ? "ema" : "model";
  if (!ema_output) ema.swap();
}

std::vector<std::pair<std::string, at::Tensor>> WeightAverage::named() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const std::vector<at::Tensor>& avg = swapped_ ? current_ : average_;
  for (size_t i = 0; i < names_.size(); ++i) out.emplace_back(names_[i], avg[i].detach());
  return out;
}

}  // namespace dtrain::detail
