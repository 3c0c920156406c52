#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "dtrain/error.h"

namespace dtrain::detail {

LrSchedule::LrSchedule(const TrainConfig& train, int64_t total_steps)
    : lr_(train.lr), warmup_(train.warmup_steps), schedule_(train.schedule), total_(total_steps),
      step_size_(train.lr_step_size), gamma_(train.lr_gamma) {
  if (schedule_ == Schedule::kStep && step_size_ < 1)
    throw Error("train.schedule is step: set train.lr_step_size (steps between decays) to 1 or more",
                "train.lr_step_size");
}

double LrSchedule::at(int64_t step) const {
  double lr = lr_;
  if (warmup_ > 0 && step < warmup_)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (schedule_ == Schedule::kCosine && total_ > warmup_) {
    const double progress =
        static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
    lr *= 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
  if (schedule_ == Schedule::kLinear && total_ > warmup_)
    lr *= 1.0 - std::min(1.0, static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_));
  if (schedule_ == Schedule::kStep)
    lr *= std::pow(gamma_, static_cast<double>((step - warmup_) / step_size_));
  return lr;
}

}  // namespace dtrain::detail
