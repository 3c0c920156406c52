// The eager step: this rank's share of one global batch, run op by op. Forward and backward of
// every micro-batch under autocast (the gradient engine all-reduces on the last one), then the
// update: unscale and the non-finite check (fp16, train.skip_nonfinite), clip, optimizer step.
// When any rank runs out of memory the attempt is abandoned on every rank, the micro-batch
// shrinks and the step is redone on the same samples (Note [out-of-memory protocol]). The
// CUDA-graph step captures the same two halves.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "dtrain/data/dataset.h"
#include "train/recovery.h"
#include "train/step_context.h"

namespace dtrain::detail {

class EagerStep {
 public:
  EagerStep(StepContext& ctx, MicroBatch& micro);

  // One optimizer step at learning rate `lr`; `step` counts the steps done before it.
  void run(const Batch& batch, int64_t step, double lr);

  // Forward and backward of every micro-batch of `batch`, adding the step's loss to `loss_sum`
  // (a 0-dim double on the device); gradients end up averaged over all ranks. Returns false,
  // with no gradient left, when any rank ran out of memory. `capturing`: inside a CUDA graph
  // capture, where an out-of-memory error is not recovered but thrown.
  bool forward_backward(const Batch& batch, int64_t micro, at::Tensor& loss_sum, int64_t step,
                        bool capturing);
  // The update after forward_backward: loss-scale check, clipping, the optimizer step, and the
  // step's loss added to the loss window. Device work only without a loss scaler (capturable).
  void update(const at::Tensor& loss_sum, double lr, int64_t step);

  // The loss window since the last take: the sum of the step losses, the steps before the
  // first non-finite one (all of them while the sum is finite), and the steps left out because
  // they were skipped for a non-finite loss (train.skip_nonfinite).
  struct Window {
    double sum = 0;
    int64_t finite_steps = 0;
    int64_t left_out = 0;
  };
  // Reads the window (a host sync); take_window() also starts a new one.
  Window peek_window();
  Window take_window();
  // Adds `loss` to the window as if from `steps` earlier steps (a resumed run's window).
  void restore_window(double loss, int64_t steps);
  // The window's device tensor, allocated on first use with its finite-step count (the graph
  // step needs both before capture).
  at::Tensor& window();
  int64_t skipped_steps() const { return skipped_; }

 private:
  StepContext& ctx_;
  MicroBatch& micro_;
  at::Tensor window_;        // sum of step losses since the last take (device, double)
  at::Tensor finite_steps_;  // steps while window_ was finite (device, int64)
  int64_t left_out_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace dtrain::detail
