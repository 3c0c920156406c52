// The loss window: the training loss summed since the last read, on every rank's device, read
// as one mean over all ranks every run.log_every steps, at each epoch's end and at the run's last
// step (a collective on the control plane). A checkpoint holds the window's sum over ranks and
// its steps, so that a resumed run's next read gives the uninterrupted run's mean. A non-finite
// sum is an Error naming the first step where the loss stopped being finite.
#pragma once

#include <cstdint>

#include "checkpoint/state.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "runtime/watchdog.h"
#include "train/eager_step.h"

namespace dtrain::detail {

class LossWindow {
 public:
  LossWindow(EagerStep& eager, Communicator& control, Watchdog& watchdog, Precision precision,
             int64_t first_step);
  // A resumed run: the checkpoint's window, written by `saved_world` ranks.
  void restore(const LoopPosition& from, int saved_world);
  void add_step() { ++steps_; }
  int64_t steps() const { return steps_; }
  // The mean over all ranks since the last read; starts a new window after `step`.
  double read(int64_t step);
  // The window's sum over all ranks, without starting a new one (for a checkpoint).
  double total();

 private:
  // Reduces the window over ranks: {sum, mean}; throws on a non-finite sum.
  std::pair<double, double> reduce(bool take);

  EagerStep& eager_;
  Communicator& control_;
  Watchdog& watchdog_;
  Precision precision_;
  int64_t steps_ = 0;
  int64_t first_ = 0;  // the step before the window's first
};

}  // namespace dtrain::detail
