// The learning-rate schedule: linear warmup over train.warmup_steps, then constant or a cosine
// decay to zero at the last step (PyTorch's LambdaLR forms of the same).
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
};

}  // namespace dtrain::detail
