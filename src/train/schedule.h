// The learning-rate schedule: linear warmup over train.warmup_steps, then constant, a cosine or
// linear decay to zero at the last step, or a decay by train.lr_gamma every train.lr_step_size
// steps. After warmup, step t (from 0) has torch.optim.lr_scheduler's learning rate after t
// scheduler steps: CosineAnnealingLR's closed form, LinearLR(1, 0, T), StepLR(step_size, gamma).
#pragma once

#include <cstdint>

#include "dtrain/config.h"

namespace dtrain::detail {

class LrSchedule {
 public:
  LrSchedule(const TrainConfig& train, int64_t total_steps);
  // The learning rate of step `step` (0-based).
  double at(int64_t step) const;

 private:
  double lr_;
  int64_t warmup_;
  Schedule schedule_;
  int64_t total_;
  int64_t step_size_;
  double gamma_;
};

}  // namespace dtrain::detail
