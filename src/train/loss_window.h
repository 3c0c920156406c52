// The loss window: the training loss summed since the last read, on every rank's device, read
// as one mean over all ranks every run.log_every steps, at each epoch's end and at the run's last
// step (a collective on the control plane). It is the window's one owner: the eager step adds
// each step's loss on the device (add, capturable, so the CUDA-graph step adds through the same
// call), the loop counts the steps, and a checkpoint holds the window's sum over ranks and its
// steps, so that a resumed run's next read gives the uninterrupted run's mean. A non-finite sum
// is an Error naming the first step where the loss stopped being finite.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>

#include "dtrain/records.h"
#include "train/step_context.h"

namespace dtrain::detail {

class LossWindow {
 public:
  // The device tensors are allocated here, before any CUDA-graph capture adds to them.
  // `ctx` gives the device, the control communicator, the watchdog and the precision.
  LossWindow(const StepContext& ctx, int64_t first_step);
  // A resumed run: the checkpoint's window, written by `saved_world` ranks.
  void restore(const LoopPosition& from, int saved_world);

  // Adds one step's loss (a 0-dim double on the device): device work only, no host sync.
  void add(const at::Tensor& loss_sum);
  // A step skipped for a non-finite loss (train.skip_nonfinite): its loss stays out of the mean.
  void leave_out() { ++left_out_; }
  // Counts one finished step (the loop, after every step, whichever engine ran it).
  void add_step() { ++steps_; }
  int64_t steps() const { return steps_; }

  // The mean over all ranks since the last read; starts a new window after `step`.
  double read(int64_t step);
  // The window's sum over all ranks, without starting a new one (for a checkpoint).
  double total();

 private:
  // Reduces the window over ranks: {sum, mean}; throws on a non-finite sum.
  std::pair<double, double> reduce(bool take);

  const StepContext& ctx_;
  at::Tensor sum_;           // sum of step losses since the last read (device, double)
  at::Tensor finite_steps_;  // steps while sum_ was finite (device, int64)
  int64_t left_out_ = 0;     // skipped non-finite steps since the last read
  int64_t steps_ = 0;
  int64_t first_ = 0;  // the step before the window's first
};

}  // namespace dtrain::detail
