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
  // Per step from `first_step` on: this rank's share of the global batch.
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> epochs;  // the epoch of each of `batches` (Dataset::fetch)
};

// PyTorch's DistributedSampler order (seed run.seed, reshuffled each epoch when data.shuffle),
// cut into rank batches; an epoch's last, smaller batch is kept unless train.drop_last. A
// training set smaller than one global batch is an Error naming train.global_batch.
// `first_step` > 0 (a resumed run) leaves out the steps before it: the union over ranks of step
// s's batches is the permutation's samples [s * global_batch, (s + 1) * global_batch) whatever
// the world size, so a run resumed on another number of ranks continues the same order.
StepPlan plan_steps(const Config& cfg, int64_t train_size, int world, int rank,
                    int64_t first_step = 0);

// Warnings (log::warn) for settings the plan leaves partly unused: train.max_steps past the
// epochs, warmup as long as the run, a profiler window past its end. The run goes on.
void warn_about_limits(const Config& cfg, const StepPlan& plan);

}  // namespace dtrain::detail
