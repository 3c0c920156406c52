// The fault injectors the unit and dist tiers hand the Trainer or a StepContext
// (dtrain/faults.h): out of memory once at a step, at every micro-batch (or the first N), at one
// allocation of the start-up, and a non-finite loss at a step. Each fails only where it is set:
// a dist test sets one on its victim rank alone.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/faults.h"

namespace dtrain::test {

// Out of memory once: the first attempt at step `step` while the micro-batch is larger than 1
// (a shrunken retry of the step then fits).
class OomOnce : public FaultInjector {
 public:
  explicit OomOnce(int64_t step) : step_(step) {}
  Fault before_micro_batch(int64_t step, int64_t micro_batch) override {
    if (fired_ || step != step_ || micro_batch <= 1) return Fault::kNone;
    fired_ = true;
    return Fault::kOutOfMemory;
  }

 private:
  int64_t step_;
  bool fired_ = false;
};

// Out of memory at every micro-batch, at every size, or (`first` > 0) at the first `first`
// attempts only.
class OomAlways : public FaultInjector {
 public:
  explicit OomAlways(int first = 0) : first_(first) {}
  Fault before_micro_batch(int64_t, int64_t) override {
    ++asked_;
    return first_ == 0 || asked_ <= first_ ? Fault::kOutOfMemory : Fault::kNone;
  }

 private:
  int first_, asked_ = 0;
};

// Out of memory at one start-up allocation, every time it is asked; `asked` lists the stages
// asked about, in order.
class OomAtStartUp : public FaultInjector {
 public:
  explicit OomAtStartUp(StartUp stage) : stage_(stage) {}
  Fault before_micro_batch(int64_t, int64_t) override { return Fault::kNone; }
  Fault before_start_up(StartUp stage) override {
    asked.push_back(stage);
    return stage == stage_ ? Fault::kOutOfMemory : Fault::kNone;
  }
  std::vector<StartUp> asked;

 private:
  StartUp stage_;
};

// Every micro-batch of step `step` gets a NaN loss: non-finite gradients on the ranks it is set
// on.
class NanAt : public FaultInjector {
 public:
  explicit NanAt(int64_t step) : step_(step) {}
  Fault before_micro_batch(int64_t step, int64_t) override {
    return step == step_ ? Fault::kNonFiniteLoss : Fault::kNone;
  }

 private:
  int64_t step_;
};

}  // namespace dtrain::test
