#include "train/eager_step.h"

#include <cmath>
#include <string>

#include "cuda/memory.h"
#include "dtrain/amp.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "optim/clip.h"
#include "train/loss.h"
#include "train/memory_ladder.h"
#include "train/start_up_memory.h"
#include "util/clock.h"
#include "util/format.h"
#include "util/torch_compat.h"

namespace dtrain::detail {

EagerStep::EagerStep(StepContext& ctx, MicroBatch& micro, LossWindow& window)
    : ctx_(ctx), micro_(micro), window_(window) {}

at::Tensor EagerStep::model_inputs(const at::Tensor& inputs, bool mixed) const {
  const Model::PixelInputs form = ctx_.model->pixel_inputs();
  const c10::DeviceType device = inputs.device().type();
  const at::ScalarType dtype = form.in_autocast_dtype && compat::autocast_enabled(device)
                                   ? compat::autocast_dtype(device)
                                   : at::kFloat;
  if (mixed) return inputs.to(dtype).contiguous(form.layout);
  return ctx_.pixels(inputs, dtype, form.layout);
}

void EagerStep::run(const Batch& batch, int64_t step, double lr) {
  clear_gradients(ctx_);
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(ctx_.device).dtype(at::kDouble));
  PhaseTimes& phases = *ctx_.phases;
  auto t0 = Clock::now();
  const double comm_before = phases.comm;
  while (!forward_backward(batch, micro_.size(), loss_sum, step, /*capturing=*/false)) {
    // Out of memory on some rank: every rank shrinks the micro-batch (more accumulation) and
    // redoes the step on the same samples. The global batch, and so the result, is unchanged.
    if (!updated_) end_if_state_does_not_fit(step, micro_.size());
    const auto ladder = [this] { return memory_ladder(ctx_, usable_memory(ctx_)); };
    // At one sample nothing is left to shrink. Every rank is here, none in a collective: the
    // first rank that ran out of memory says why, once (an AgreedError), and no rank aborts.
    if (micro_.exhausted() && ctx_.world > 1)
      agree_no_failure(*ctx_.control,
                       ran_out_ ? micro_.exhausted_text(step, ladder) : std::string(),
                       "the training step", "train.micro_batch");
    micro_.shrink(step, ladder);
    loss_sum.zero_();
  }
  phases.compute += seconds_since(t0) - (phases.comm - comm_before);
  ctx_.watchdog->beat("optimizer step");
  t0 = Clock::now();
  gather_seconds_ = 0;
  update(loss_sum, lr, step, /*capturing=*/false);
  phases.optimizer += seconds_since(t0) - gather_seconds_;
  phases.comm += gather_seconds_;
}

// Note [out-of-memory protocol]: a rank that runs out of memory in the middle of a step must not
// leave its peers waiting in the gradient all-reduce. It stops computing, still completes every
// bucket's collective (with zeros where its gradients are missing: Reducer::finish(abandon)),
// and then every rank agrees on a flag (max over ranks) before anyone uses the result. On a
// raised flag every rank drops its gradients, shrinks the micro-batch alike (MicroBatch), and
// redoes the step on the same samples; `micro_batch: auto` (find_micro_batch) measures before
// training instead. The flag is agreed on every step, so this costs one small CPU all-reduce.
// At a micro-batch of 1 nothing is left to shrink: the ranks agree once more, on the first
// failing rank's message (the memory ladder of that rank), and all throw it as one AgreedError.
bool EagerStep::forward_backward(const Batch& batch, int64_t micro, at::Tensor& loss_sum,
                                 int64_t step, bool capturing) {
  Watchdog& wd = *ctx_.watchdog;
  const int64_t n = batch.size();
  const int64_t pieces = (n + micro - 1) / micro;
  bool failed = false;
  std::string failure;
  ran_out_ = false;
  try {
    // The whole rank batch standardized, erased and mixed once, in fp32, then put in the model's
    // input form; its micro-batches are pieces of it (Note [batch mixing]).
    at::Tensor all_inputs = batch.inputs, all_targets = batch.targets;
    if (ctx_.mix) {
      AutocastGuard autocast(ctx_.device, ctx_.precision);
      std::tie(all_inputs, all_targets) = ctx_.mix->apply(ctx_.pixels(batch.inputs), batch.targets);
      all_inputs = model_inputs(all_inputs, /*mixed=*/true);
    }
    for (int64_t m = 0; m < pieces; ++m) {
      const int64_t begin = m * micro, len = std::min(micro, n - begin);
      const FaultInjector::Fault fault =
          ctx_.faults ? ctx_.faults->before_micro_batch(step, micro) : FaultInjector::Fault::kNone;
      if (fault == FaultInjector::Fault::kOutOfMemory)
        throw InjectedOutOfMemory("injected out-of-memory error (fault injector)");
      at::Tensor inputs = all_inputs.narrow(0, begin, len);
      at::Tensor targets = all_targets.narrow(0, begin, len);
      wd.beat("forward/backward");
      at::Tensor loss;
      {
        AutocastGuard autocast(ctx_.device, ctx_.precision);
        loss = training_loss(ctx_.loss, *ctx_.model, model_inputs(inputs, ctx_.mix != nullptr),
                             targets, ctx_.label_smoothing);
        // Each micro-batch's mean loss is weighted by its share of this rank's samples, so the
        // accumulated gradient is the mean over the rank's share of the global batch.
        loss = loss * (static_cast<double>(len) / n);
        if (fault == FaultInjector::Fault::kNonFiniteLoss) loss = loss * std::nan("");
      }
      const bool last = m == pieces - 1;
      // Only the last micro-batch communicates; earlier ones accumulate locally.
      ctx_.data_parallel->before_backward(last);
      (ctx_.scaler ? ctx_.scaler->scale(loss) : loss).backward();
      loss_sum += loss.detach().to(at::kDouble);
    }
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e) || capturing) throw;
    // The peers wait in a BatchNorm collective this rank will not reach: the job ends, naming
    // this rank (Note [BatchNorm on N ranks]).
    if (ctx_.sync_batch_norm)
      throw Error("out of memory at step " + std::to_string(step) + " with micro-batch " +
                      std::to_string(micro) + " (" + first_line(e.what()) +
                      "); with model.sync_batch_norm the other ranks wait in this step's "
                      "BatchNorm collectives, so the step cannot be retried with a smaller "
                      "micro-batch: set train.micro_batch lower (micro_batch auto measures it "
                      "before training)",
                  "train.micro_batch");
    failed = ran_out_ = true;
    failure = first_line(e.what());
    ran_out_words_ = allocator_words(e);
  }
  // SyncBatchNorm's collectives ran inside forward and backward: communication, not compute.
  if (ctx_.sync_batch_norm) ctx_.phases->comm += ctx_.sync_batch_norm->take_seconds();
  wd.beat("gradient all-reduce");
  const auto t_comm = Clock::now();
  ctx_.data_parallel->after_backward(/*abandon=*/failed);
  int64_t any_failed = failed ? 1 : 0;
  if (ctx_.world > 1) {
    at::Tensor flag = at::tensor({any_failed}, at::kLong);
    ctx_.control->all_reduce(flag, ReduceOp::kMax);
    any_failed = flag.item<int64_t>();
  }
  ctx_.phases->comm += seconds_since(t_comm);
  if (any_failed) {
    if (failed)
      log::warn("out of memory at step " + std::to_string(step) + " with micro-batch " +
                std::to_string(micro) + ": " + failure);
    clear_gradients(ctx_);  // nothing of this attempt survives
    empty_cache(ctx_.device);
    return false;
  }
  return true;
}

void EagerStep::end_if_state_does_not_fit(int64_t step, int64_t micro) {
  // Uniform on every rank: the flag was agreed, and every rank knows its device's limit or none.
  const int64_t allowed = allowance(ctx_).bytes();
  if (allowed == 0) return;  // the CPU: no limit to compare with, so the micro-batch shrinks
  StartUpMemory memory(ctx_);
  if (ran_out_ && memory_kinds(ctx_).total() > allowed)
    memory.ran_out("in the first step's forward and backward (step " + std::to_string(step) +
                   ", micro-batch " + std::to_string(micro) + ": " + ran_out_words_ + ")");
  memory.agree();
}

void EagerStep::update(const at::Tensor& loss_sum, double lr, int64_t step, bool capturing) {
  bool skip = false;
  // Sharded, each rank holds its shard of the averaged gradients (Note [sharded optimizer]): the
  // scaler's flag and the clipping norm are agreed over the ranks.
  DataParallel& dp = *ctx_.data_parallel;
  const std::vector<at::Tensor>& grads_of = dp.update_gradients();
  Communicator* across = dp.agreed_over();
  if (ctx_.scaler) {
    ctx_.scaler->unscale(grads_of, across);  // once, after the all-reduce, before clipping
    skip = ctx_.scaler->found_inf();
  }
  if (!skip) {
    if (ctx_.clip_grad_norm > 0) clip_gradients(grads_of, ctx_.clip_grad_norm, across);
    if (updated_ || capturing) {
      ctx_.optimizer->step(lr);  // this rank's shard only, with dist.shard_optimizer
    } else {
      // The first optimizer step makes its temporaries beside the whole state: out of memory
      // there is agreed before the parameters' gather, one line on every rank (Note [memory
      // ladder]). Every rank is here: the skip decision above is the same on every rank.
      StartUpMemory memory(ctx_);
      memory.run(FaultInjector::StartUp::kFirstUpdate, [&] { ctx_.optimizer->step(lr); });
      memory.agree();
      updated_ = true;
    }
    if (dp.gathers_parameters()) {
      // Every shard's new values to every rank (Note [sharded optimizer]).
      const auto t0 = Clock::now();
      dp.after_optimizer_step();
      gather_seconds_ += seconds_since(t0);
    }
  } else {
    ++skipped_;
    log::info("step " + std::to_string(step) + ": non-finite gradients with loss scale " +
              format("%g", ctx_.scaler->current_scale()) +
              "; optimizer step skipped on every rank");
  }
  if (ctx_.scaler) ctx_.scaler->update();
  if (skip && !std::isfinite(loss_sum.item<double>())) {
    window_.leave_out();  // a skipped step's non-finite loss stays out of the mean
    return;
  }
  window_.add(loss_sum);
}

}  // namespace dtrain::detail
