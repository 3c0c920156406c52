#include "train/plan.h"

#include <algorithm>
#include <limits>
#include <string>

#include "dtrain/data/sampler.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "util/host_memory.h"

namespace dtrain::detail {

StepPlan plan_steps(const Config& cfg, int64_t train_size, int world, int rank,
                    int64_t first_step) {
  const TrainConfig& t = cfg.train;
  const int64_t rank_batch = cfg.resolved.rank_batch;
  DistributedSampler sampler(train_size, world, rank, cfg.data.shuffle,
                             static_cast<uint64_t>(cfg.run.seed), /*drop_last=*/false);
  const int64_t full = sampler.num_samples() / rank_batch;
  const bool partial = !t.drop_last && sampler.num_samples() % rank_batch != 0;
  StepPlan plan;
  plan.steps_per_epoch = full + (partial ? 1 : 0);
  if (plan.steps_per_epoch == 0)
    throw Error("the training set (" + std::to_string(train_size) +
                    " samples) is smaller than one global batch (" +
                    std::to_string(t.global_batch) + ")",
                "train.global_batch");
  // epochs x steps per epoch, and the samples of all those steps, must fit in int64.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const bool steps_overflow = t.epochs > kMax / plan.steps_per_epoch;
  if (steps_overflow && t.max_steps == 0)
    throw Error("train.epochs " + std::to_string(t.epochs) + " x " +
                    std::to_string(plan.steps_per_epoch) +
                    " steps per epoch overflows the step count (int64); use fewer epochs or "
                    "set train.max_steps",
                "train.epochs");
  plan.total_steps = steps_overflow ? t.max_steps : plan.steps_per_epoch * t.epochs;
  if (t.max_steps > 0) plan.total_steps = std::min(plan.total_steps, t.max_steps);
  const std::string steps_key =
      plan.total_steps == t.max_steps ? "train.max_steps" : "train.epochs";
  if (plan.total_steps > kMax / t.global_batch)
    throw Error(std::to_string(plan.total_steps) + " steps x train.global_batch " +
                    std::to_string(t.global_batch) +
                    " samples overflows the sample count (int64); lower " + steps_key,
                steps_key);
  // The plan holds every step's sample indices (int64) for this rank.
  check_host_bytes(static_cast<double>(plan.total_steps) * static_cast<double>(rank_batch) * 8.0,
                   "the step plan (" + std::to_string(plan.total_steps) + " steps x " +
                       std::to_string(rank_batch) + " sample indices per rank)",
                   steps_key, "lower " + steps_key);
  int64_t planned = 0;  // steps planned, the skipped ones included
  for (int64_t epoch = first_step / plan.steps_per_epoch;
       epoch < t.epochs && planned < plan.total_steps; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> mine = sampler.indices();
    planned = epoch * plan.steps_per_epoch;
    for (int64_t s = 0; s < plan.steps_per_epoch && planned < plan.total_steps; ++s, ++planned) {
      if (planned < first_step) continue;
      const int64_t begin = s * rank_batch;
      const int64_t end = std::min<int64_t>(begin + rank_batch, mine.size());
      plan.batches.emplace_back(mine.begin() + begin, mine.begin() + end);
      plan.epochs.push_back(epoch);
    }
  }
  return plan;
}

// Settings that leave part of themselves unused: the run goes on, and says so.
void warn_about_limits(const Config& cfg, const detail::StepPlan& plan) {
  const TrainConfig& t = cfg.train;
  if (t.max_steps > plan.total_steps)
    log::warn("train.max_steps " + std::to_string(t.max_steps) + " is more than train.epochs " +
              std::to_string(t.epochs) + " x " + std::to_string(plan.steps_per_epoch) +
              " steps per epoch: training stops after " + std::to_string(plan.total_steps) +
              " steps (raise train.epochs to train longer)");
  if (t.warmup_steps >= plan.total_steps && t.warmup_steps > 0)
    log::warn("train.warmup_steps " + std::to_string(t.warmup_steps) + " is not less than the " +
              std::to_string(plan.total_steps) +
              " steps of the run: the learning rate never "
              "reaches train.lr");
  if (cfg.run.profile_steps > 0 && cfg.run.profile_start >= plan.total_steps)
    log::warn("run.profile_start " + std::to_string(cfg.run.profile_start) + " is past the " +
              std::to_string(plan.total_steps) + " steps of the run: the profiler records nothing");
}

}  // namespace dtrain::detail
