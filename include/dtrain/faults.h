// FaultInjector: the test seam for failures inside a training step and in the start-up before it.
// The eager step asks it before each micro-batch's forward (and `micro_batch: auto` before each
// size it tries); the start-up asks it before each of its large allocations (the model to the
// device, the gradient buckets, the optimizer state, the one-sample output check, the first
// optimizer step). Tests set one (the Trainer's constructor, for the start-up;
// Trainer::set_fault_injector) to make one rank run out of memory or produce a non-finite loss
// at a chosen place. Nothing in dtrain reads the environment for it, and a run without one has
// none.
#pragma once

#include <cstdint>

namespace dtrain {

class FaultInjector {
 public:
  // kNonFiniteLoss: this micro-batch's loss becomes NaN (its gradients too).
  enum class Fault { kNone, kOutOfMemory, kNonFiniteLoss };
  // The start-up's allocations, in their order (Note [memory ladder]): the model's parameters
  // and buffers moved to the device; the gradient engine's buckets (several ranks) and, with
  // dist.shard_optimizer, the shard's buffers; the optimizer state; the model run once on one
  // sample (the output check); the first optimizer step of a fit() (its temporaries).
  enum class StartUp {
    kModelToDevice,
    kGradientBuckets,
    kOptimizerState,
    kOutputCheck,
    kFirstUpdate
  };
  virtual ~FaultInjector() = default;
  // `step`: steps done so far; `micro_batch`: the micro-batch size of this attempt. `micro_batch:
  // auto` asks it too, with step -1, before each size it tries (kOutOfMemory: that size does not
  // fit).
  virtual Fault before_micro_batch(int64_t step, int64_t micro_batch) = 0;
  // Before each of the start-up's allocations; kOutOfMemory: it runs out of memory. None by
  // default.
  virtual Fault before_start_up(StartUp) { return Fault::kNone; }
};

}  // namespace dtrain
