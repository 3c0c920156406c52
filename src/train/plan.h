// The step plan of a run: which samples this rank trains on at every step, for all epochs at
// once, so that one loader keeps prefetching across epoch boundaries and evaluations.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/config.h"

namespace dtrain::detail {

struct StepPlan {
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // min(steps_per_epoch * epochs, max_steps)
  std::vector<std::vector<int64_t>> batches;  // per step: this rank's share of the global batch
};

// PyTorch's DistributedSampler order (seed run.seed, reshuffled each epoch when data.shuffle),
// cut into rank batches; an epoch's last, smaller batch is kept unless train.drop_last. A
// training set smaller than one global batch is an Error naming train.global_batch.
StepPlan plan_steps(const Config& cfg, int64_t train_size, int world, int rank);

}  // namespace dtrain::detail
