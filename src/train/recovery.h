// Out-of-memory recovery and `micro_batch: auto`: the micro-batch in use, how it shrinks when a
// step runs out of memory on any rank, and how `auto` measures the largest that fits. The global
// batch, and so the result of training, never changes (Note [out-of-memory protocol]).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "train/out_of_memory.h"
#include "train/step_context.h"

namespace dtrain::detail {

// Out-of-memory recovery is off (Trainer::set_out_of_memory_recovery(false)) and a step ran out
// of memory on some rank: thrown by MicroBatch::shrink on every rank alike, after the ranks
// agreed on it, so that none is left inside a collective. `dtrain bench` reports the size as
// "does not fit".
class MicroBatchDoesNotFit : public Error {
 public:
  MicroBatchDoesNotFit(int64_t micro, int64_t step);
  int64_t micro_batch() const { return micro_; }
  int64_t step() const { return step_; }

 private:
  int64_t micro_, step_;
};

// The micro-batch of this rank's share of a step. It always divides the rank batch, so every
// micro-batch of a step has the same size, and it is the same on every rank.
class MicroBatch {
 public:
  // `recover`: whether shrink() may shrink (else it throws MicroBatchDoesNotFit).
  MicroBatch(int64_t rank_batch, int64_t micro, int64_t global_batch, bool recover = true);
  int64_t size() const { return micro_; }
  int64_t accum_steps() const { return rank_batch_ / micro_; }
  int64_t retries() const { return retries_; }
  // After a step ran out of memory on some rank (every rank calls it): the next smaller divisor
  // of the rank batch, about half. At 1 there is nothing left: an Error naming train.micro_batch,
  // with `ladder()`'s text when given (the settings that free memory, Note [memory ladder]).
  // Without recovery: MicroBatchDoesNotFit, the size unchanged.
  void shrink(int64_t step, const std::function<std::string()>& ladder = nullptr);
  // Whether shrink() has nothing left to try (recovery on, micro-batch 1), and the cause of the
  // Error it then throws.
  bool exhausted() const { return recover_ && micro_ <= 1; }
  std::string exhausted_text(int64_t step, const std::function<std::string()>& ladder) const;

 private:
  int64_t rank_batch_, micro_, global_batch_;
  bool recover_;
  int64_t retries_ = 0;
};

// `micro_batch: auto`: tries the rank batch, then smaller divisors, forward and backward on a
// real batch of the real model (no communication), keeping 10% of the device free; every rank
// takes the smallest that fits anywhere. Leaves no gradient behind. When one sample runs out of
// memory on some rank, every rank throws the same AgreedError naming train.micro_batch with the
// memory ladder (Note [memory ladder]), one sample's peak with activation checkpointing measured
// where the model has blocks; where the batch could not be moved to the device, or what the
// state holds is more than the device allows, with the start-up's line instead (what the state
// needs against what is allowed, state_does_not_fit).
int64_t find_micro_batch(const StepContext& ctx, const Dataset& train, int64_t rank_batch);

}  // namespace dtrain::detail
