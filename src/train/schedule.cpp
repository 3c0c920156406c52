#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include <yaml-cpp/yaml.h>

#include "config/schema.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {

LrSchedule::LrSchedule(const TrainConfig& train, int64_t total_steps, int64_t start)
    : start_(std::max<int64_t>(0, start)),
      lr_(train.lr),
      warmup_(train.warmup_steps),
      schedule_(train.schedule),
      total_(total_steps - start_),
      step_size_(train.lr_step_size),
      gamma_(train.lr_gamma) {
  if (schedule_ == Schedule::kStep && step_size_ < 1)
    throw Error(
        "train.schedule is step: set train.lr_step_size (steps between decays) to 1 or more",
        "train.lr_step_size");
}

double LrSchedule::at(int64_t step) const {
  step = std::max<int64_t>(0, step - start_);
  double lr = lr_;
  if (warmup_ > 0 && step < warmup_)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (schedule_ == Schedule::kCosine && total_ > warmup_) {
    const double progress =
        static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
    lr *= 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
  if (schedule_ == Schedule::kLinear && total_ > warmup_)
    lr *= 1.0 - std::min(1.0, static_cast<double>(step - warmup_) /
                                  static_cast<double>(total_ - warmup_));
  if (schedule_ == Schedule::kStep)
    lr *= std::pow(gamma_, static_cast<double>((step - warmup_) / step_size_));
  return lr;
}

namespace {

// The keys that shape the schedule and its length.
const char* const kScheduleKeys[] = {"train.lr",           "train.schedule", "train.warmup_steps",
                                     "train.lr_step_size", "train.lr_gamma", "train.epochs",
                                     "train.max_steps"};

}  // namespace

ResumedSchedule resumed_schedule(const Config& cfg, int64_t total_steps, const ResumePoint* from) {
  ResumedSchedule out;
  if (from == nullptr) return out;
  const LoopPosition& p = from->position;
  out.start = p.schedule_start;
  // The checkpoint's run: this config with its schedule keys as they were.
  Config was = cfg;
  bool keys_changed = false;
  const std::map<std::string, std::string> now = config_values(cfg);
  try {
    for (const char* key : kScheduleKeys) {
      const auto it = from->saved_config.find(key);
      if (it == from->saved_config.end() || it->second == now.at(key)) continue;
      const config::Field* f = config::find_field(key);
      if (f == nullptr) return out;
      f->set(was, YAML::Load(it->second), std::string("the checkpoint's ") + key);
      keys_changed = true;
    }
  } catch (const std::exception&) {
    return out;  // a value this dtrain does not read: the schedule goes on unannounced
  }
  const TrainConfig& t = cfg.train;
  int64_t was_total = p.steps_per_epoch * was.train.epochs;
  if (was.train.max_steps > 0) was_total = std::min(was_total, was.train.max_steps);
  const bool trains_on = p.step >= was_total && total_steps > p.step;
  if (trains_on && t.resume_schedule == ResumeSchedule::kRestart) out.start = p.step;
  if (!trains_on && !keys_changed && out.start == p.schedule_start) return out;
  if (p.step >= total_steps) return out;  // nothing to train: the loop says so

  const double before = LrSchedule(was.train, was_total, p.schedule_start).at(p.step - 1);
  const double after = LrSchedule(t, total_steps, out.start).at(p.step);
  const std::string kind = to_string(t.schedule);
  std::string what;
  if (trains_on && out.start == p.step) {
    what = format("train.resume_schedule restart: a new %s schedule over the %lld added steps",
                  kind.c_str(), static_cast<long long>(total_steps - p.step));
  } else {
    what = format("the %s schedule of a %lld-step run", kind.c_str(),
                  static_cast<long long>(total_steps - out.start));
    if (trains_on)
      what += format(
          " (train.resume_schedule stretch; restart would start a new schedule over the %lld added "
          "steps)",
          static_cast<long long>(total_steps - p.step));
  }
  out.line =
      format("learning rate at the resume: %.3g after step %lld -> %.3g at step %lld: ", before,
             static_cast<long long>(p.step), after, static_cast<long long>(p.step + 1)) +
      what;
  return out;
}

}  // namespace dtrain::detail
