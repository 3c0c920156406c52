// FaultInjector: the test seam for failures inside a training step. The eager step asks it before
// each micro-batch's forward (and `micro_batch: auto` before each size it tries); tests set one (Trainer::set_fault_injector) to make one rank run out
// of memory or produce a non-finite loss at a chosen step. Nothing in dtrain reads the
// environment for it, and a run without one has none.
#pragma once

#include <cstdint>

namespace dtrain {

class FaultInjector {
 public:
  // kNonFiniteLoss: this micro-batch's loss becomes NaN (its gradients too).
  enum class Fault { kNone, kOutOfMemory, kNonFiniteLoss };
  virtual ~FaultInjector() = default;
  // `step`: steps done so far; `micro_batch`: the micro-batch size of this attempt. `micro_batch:
  // auto` asks it too, with step -1, before each size it tries (kOutOfMemory: that size does not
  // fit).
  virtual Fault before_micro_batch(int64_t step, int64_t micro_batch) = 0;
};

}  // namespace dtrain
