#include "train/graph_step.h"

#include "cuda/memory.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "util/clock.h"
#include "util/format.h"

namespace dtrain::detail {

GraphStep::GraphStep(StepContext& ctx, EagerStep& eager, const MicroBatch& micro, GraphMode mode,
                     int64_t rank_batch)
    : ctx_(ctx), eager_(eager), micro_(micro), mode_(mode), rank_batch_(rank_batch) {
  std::string why = mode_ == GraphMode::kOff ? "" : blocker();
  // Every rank uses graphs or none does (their collectives must match; Note [reducer in the
  // graph]).
  if (mode_ != GraphMode::kOff && ctx_.world > 1 && !all_ranks(why.empty()) && why.empty())
    why = "another rank cannot capture it";
  if (mode_ == GraphMode::kOn && !why.empty())
    throw Error("cannot capture the training step in a CUDA graph: " + why, "train.cuda_graph");
  wanted_ = mode_ != GraphMode::kOff && why.empty();
  if (mode_ == GraphMode::kAuto && !why.empty() && ctx_.device.is_cuda())
    log::detail("training step not captured in a CUDA graph: " + why);
  if (wanted_) side_stream_.emplace(ctx_.device);
}

std::string GraphStep::blocker() const {
  if (!ctx_.device.is_cuda()) return "this rank computes on the CPU";
  if (!cuda_graphs_available())
    return "this build of dtrain cannot capture CUDA graphs (needs CUDA and LibTorch 2.x)";
  if (!ctx_.data_parallel->capturable())
    return "gradients are averaged by the gradient engine over MPI, on the host (dist.backend: "
           "nccl captures it)";
  if (ctx_.scaler)
    return "the loss scaler (fp16, or train.skip_nonfinite) decides on the host whether to skip "
           "a step";
  if (!ctx_.optimizer->capturable())
    return "the optimizer is not a fused CUDA kernel (see train.fused_optimizer; parameters "
           "must be fp32)";
  if (ctx_.model->recompute_draws_random_numbers())
    return "blocks recomputed in backward (train.activation_checkpointing: blocks) draw random "
           "numbers (model.dropout), which a graph cannot draw again alike";
  if (ctx_.faults) return "a fault injector is set";
  return "";
}

bool GraphStep::run(const Batch& batch, int64_t step, double lr) {
  if (!wanted_ || batch.size() != rank_batch_) return false;
  if (!graph_ && step >= kWarmupSteps && !capture(batch, step, lr)) return false;
  if (!graph_) return false;
  replay(batch, lr);
  return true;
}

bool GraphStep::capture(const Batch& batch, int64_t step, double lr) {
  ctx_.watchdog->beat("capturing the step in a CUDA graph");
  ctx_.optimizer->set_lr(lr);  // refreshed outside the graph before every replay
  static_batch_.inputs = batch.inputs.clone();
  static_batch_.targets = batch.targets.clone();
  static_loss_sum_ = at::zeros({}, at::TensorOptions().device(ctx_.device).dtype(at::kDouble));
  // The captured backward allocates the gradients from the graph's memory pool; the eager
  // steps' cached blocks go back to the device for that pool.
  clear_gradients(ctx_);
  empty_cache(ctx_.device);
  auto graph = std::make_unique<StepGraph>(ctx_.device);
  const int64_t micro = micro_.size();
  std::string failure;
  try {
    graph->capture([&] {
      static_loss_sum_.zero_();
      eager_.forward_backward(static_batch_, micro, static_loss_sum_, step, /*capturing=*/true);
      eager_.update(static_loss_sum_, lr, step, /*capturing=*/true);
    });
  } catch (const std::exception& e) {
    failure = first_line(e.what());
  }
  // Every rank replays the same collectives, or none does (Note [reducer in the graph]).
  if (ctx_.world > 1 && !all_ranks(failure.empty()) && failure.empty())
    failure = "another rank's capture failed";
  if (!failure.empty()) {
    graph.reset();
    clear_gradients(ctx_);
    if (mode_ == GraphMode::kOn)
      throw Error("capturing the training step in a CUDA graph failed: " + failure,
                  "train.cuda_graph");
    log::warn("the training step could not be captured in a CUDA graph (" + failure +
              "); training continues eagerly");
    wanted_ = false;
    eager_story_ = "eager (CUDA graph capture failed: " + failure + ")";
    return false;
  }
  ctx_.data_parallel->captured();
  graph_ = std::move(graph);
  graph_step_ = step;
  log::detail("training step captured in a CUDA graph at step " + std::to_string(step) +
              "; every full batch from now on is one graph launch");
  return true;
}

bool GraphStep::all_ranks(bool ok) const {
  // One flag per rank over the control plane (MPI, host). After a capture, its NCCL calls have
  // not run yet, so nothing is left half-done on any rank whichever way this goes.
  at::Tensor failed = at::tensor({ok ? 0 : 1}, at::kInt);
  ctx_.control->all_reduce(failed, ReduceOp::kSum);
  return failed.item<int>() == 0;
}

void GraphStep::replay(const Batch& batch, double lr) {
  ctx_.watchdog->beat("CUDA graph step");
  const auto t0 = Clock::now();
  static_batch_.inputs.copy_(batch.inputs, /*non_blocking=*/true);
  static_batch_.targets.copy_(batch.targets, /*non_blocking=*/true);
  ctx_.optimizer->set_lr(lr);
  graph_->replay();
  ++replays_;
  ctx_.phases->compute += seconds_since(t0);
}

std::string GraphStep::story() const {
  if (!graph_) return eager_story_;
  return "CUDA graph: captured at step " + std::to_string(graph_step_) + ", replayed " +
         std::to_string(replays_) + " times";
}

}  // namespace dtrain::detail
