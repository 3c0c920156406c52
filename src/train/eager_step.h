// The eager step: this rank's share of one global batch, run op by op. Forward and backward of
// every micro-batch under autocast (the gradient engine all-reduces on the last one), then the
// update: unscale and the non-finite check (fp16, train.skip_nonfinite), clip, optimizer step
// (with dist.shard_optimizer: this rank's shard, then its parameters to every rank, Note [sharded
// optimizer]).
// When any rank runs out of memory the attempt is abandoned on every rank, the micro-batch
// shrinks and the step is redone on the same samples (Note [out-of-memory protocol]). The
// CUDA-graph step captures the same two halves.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "dtrain/data/dataset.h"
#include "train/loss_window.h"
#include "train/recovery.h"
#include "train/step_context.h"

namespace dtrain::detail {

class EagerStep {
 public:
  EagerStep(StepContext& ctx, MicroBatch& micro, LossWindow& window);

  // One optimizer step at learning rate `lr`; `step` counts the steps done before it.
  void run(const Batch& batch, int64_t step, double lr);

  // Forward and backward of every micro-batch of `batch`, adding the step's loss to `loss_sum`
  // (a 0-dim double on the device); gradients end up averaged over all ranks. Returns false,
  // with no gradient left, when any rank ran out of memory. `capturing`: inside a CUDA graph
  // capture, where an out-of-memory error is not recovered but thrown.
  bool forward_backward(const Batch& batch, int64_t micro, at::Tensor& loss_sum, int64_t step,
                        bool capturing);
  // The update after forward_backward: loss-scale check, clipping, the optimizer step (and the
  // sharded optimizer's parameter gather), and the step's loss added to the loss window
  // (LossWindow::add). Device work only without a loss scaler (capturable). The first optimizer
  // step of this engine, unless `capturing`, is guarded: out of memory in it ends every rank with
  // one agreed line (start_up_memory.h).
  void update(const at::Tensor& loss_sum, double lr, int64_t step, bool capturing);

  int64_t skipped_steps() const { return skipped_; }

 private:
  // The batch's inputs as the model takes them (inside the step's autocast guard): uint8 pixels
  // standardized in the form the model asks for (Model::pixel_inputs), other inputs as they are;
  // `mixed` (Note [batch mixing]) fp32 images put in that form.
  at::Tensor model_inputs(const at::Tensor& inputs, bool mixed = false) const;
  // Before the first optimizer step, after some rank ran out of memory (every rank calls it):
  // where what the state holds is more than the device allows, no micro-batch can fit, so every
  // rank ends with the start-up's agreed line instead of shrinking it. Nothing on the CPU.
  void end_if_state_does_not_fit(int64_t step, int64_t micro);

  StepContext& ctx_;
  MicroBatch& micro_;
  LossWindow& window_;
  int64_t skipped_ = 0;
  double gather_seconds_ = 0;  // the last update's parameter gather (counted as communication)
  bool ran_out_ = false;       // whether this rank ran out of memory in the last forward_backward
  std::string ran_out_words_;  // and the allocator's words then
  bool updated_ = false;       // whether an optimizer step has run (the first is guarded)
};

}  // namespace dtrain::detail
