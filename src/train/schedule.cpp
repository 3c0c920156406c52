#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace dtrain::detail {

LrSchedule::LrSchedule(const TrainConfig& train, int64_t total_steps)
    : lr_(train.lr), warmup_(train.warmup_steps), schedule_(train.schedule), total_(total_steps) {}

double LrSchedule::at(int64_t step) const {
  double lr = lr_;
  if (warmup_ > 0 && step < warmup_)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (schedule_ == Schedule::kCosine && total_ > warmup_) {
    const double progress =
        static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
    lr *= 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
  return lr;
}

}  // namespace dtrain::detail
