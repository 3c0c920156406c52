#include "train/recovery.h"

#include <c10/util/Exception.h>

#include <optional>
#include <string>

#include "cuda/memory.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "train/loss.h"
#include "train/memory_ladder.h"
#include "train/out_of_memory.h"
#include "train/start_up_memory.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

// The largest divisor of `rank_batch` that is at most half of `micro`.
int64_t next_smaller(int64_t micro, int64_t rank_batch) {
  int64_t next = micro / 2;
  while (rank_batch % next != 0) --next;
  return next;
}

}  // namespace

MicroBatchDoesNotFit::MicroBatchDoesNotFit(int64_t micro, int64_t step)
    : Error("out of memory at step " + std::to_string(step) + " with a micro-batch of " +
                std::to_string(micro) +
                " samples (on some rank), and out-of-memory recovery "
                "is off",
            "train.micro_batch"),
      micro_(micro),
      step_(step) {}

MicroBatch::MicroBatch(int64_t rank_batch, int64_t micro, int64_t global_batch, bool recover)
    : rank_batch_(rank_batch), micro_(micro), global_batch_(global_batch), recover_(recover) {
  if (micro < 1 || rank_batch % micro != 0)
    throw Error("micro-batch " + std::to_string(micro) + " does not divide the rank batch " +
                std::to_string(rank_batch) + " (internal error)");
}

std::string MicroBatch::exhausted_text(int64_t step,
                                       const std::function<std::string()>& ladder) const {
  return "out of memory even with a micro-batch of 1 sample at step " + std::to_string(step) +
         "; the model does not fit on this device" + (ladder ? ": " + ladder() : std::string());
}

void MicroBatch::shrink(int64_t step, const std::function<std::string()>& ladder) {
  if (!recover_) throw MicroBatchDoesNotFit(micro_, step);
  if (micro_ <= 1) throw Error(exhausted_text(step, ladder), "train.micro_batch");
  const int64_t before = micro_;
  micro_ = next_smaller(micro_, rank_batch_);
  ++retries_;
  log::info("out of memory at step " + std::to_string(step) + ": micro-batch " +
            std::to_string(before) + " -> " + std::to_string(micro_) + ", accumulation " +
            std::to_string(accum_steps()) + " steps; global batch unchanged (" +
            std::to_string(global_batch_) + "); retrying the step");
}

int64_t find_micro_batch(const StepContext& ctx, const Dataset& train, int64_t rank_batch) {
  ctx.watchdog->beat("finding the micro-batch");
  const at::Device& device = ctx.device;
  std::vector<int64_t> sample(static_cast<size_t>(std::min<int64_t>(rank_batch, train.size())));
  for (size_t i = 0; i < sample.size(); ++i) sample[i] = static_cast<int64_t>(i);
  Batch b = train.get(sample);
  // Out of memory moving the batch to the device: the state left no room for it (Note [memory
  // ladder]); agreed below with the search's result.
  StartUpMemory memory(ctx);
  try {
    b.inputs = b.inputs.to(device);
    b.targets = b.targets.to(device);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    memory.ran_out("moving a batch of " + std::to_string(b.size()) + " samples to the device (" +
                   allocator_words(e) + ")");
  }
  const MemoryStats before = memory_stats(device);
  // The probes train nothing: the BatchNorm running statistics are put back afterwards, and
  // their statistics stay this rank's (no collective that a rank out of memory would miss: the
  // memory is the same with model.sync_batch_norm's exchange, a few values per channel).
  std::vector<at::Tensor> buffers;
  for (const auto& b : ctx.model->buffers()) buffers.push_back(b.clone());
  if (ctx.sync_batch_norm) ctx.model->set_batch_norm_sync(nullptr);
  constexpr double kHeadroom = 0.10;  // leave 10% of the device for fragmentation and spikes
  // Forward and backward of `micro` samples: the peak, or -1 when it ran out of memory.
  auto probe = [&](int64_t micro) -> int64_t {
    int64_t peak = -1;
    reset_peak_memory(device);
    try {
      if (ctx.faults &&
          ctx.faults->before_micro_batch(-1, micro) == FaultInjector::Fault::kOutOfMemory)
        throw InjectedOutOfMemory("injected out-of-memory error (fault injector)");
      at::Tensor in = b.inputs.narrow(0, 0, std::min<int64_t>(micro, b.size()));
      at::Tensor tg = b.targets.narrow(0, 0, std::min<int64_t>(micro, b.size()));
      {
        AutocastGuard autocast(device, ctx.precision);
        at::Tensor loss =
            training_loss(ctx.loss, *ctx.model, ctx.pixels(in), tg, ctx.label_smoothing);
        loss.backward();  // no prepare(true): the reducer does not communicate
      }
      peak = memory_stats(device).peak;
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
    }
    clear_gradients(ctx);
    empty_cache(device);
    return peak;
  };
  int64_t micro = rank_batch, peak = -1;
  while (memory.failure().empty()) {
    peak = probe(micro);
    const bool fits = peak >= 0 && !(before.total > 0 &&
                                     peak > static_cast<int64_t>((1.0 - kHeadroom) * before.total));
    if (fits || micro == 1) break;
    micro = next_smaller(micro, rank_batch);
  }
  {
    at::NoGradGuard no_grad;
    const auto now = ctx.model->buffers();
    for (size_t i = 0; i < buffers.size(); ++i) now[i].copy_(buffers[i]);
  }
  if (ctx.sync_batch_norm) ctx.model->set_batch_norm_sync(ctx.sync_batch_norm.get());
  std::string failure = memory.failure();
  const int64_t allowed = allowance(ctx).bytes();
  if (failure.empty() && peak < 0 && allowed > 0 && memory_kinds(ctx).total() > allowed) {
    // What the state holds is more than the device allows: no sample can fit.
    memory.ran_out("in forward and backward of one sample (micro_batch auto)");
    failure = memory.failure();
  } else if (failure.empty() && peak < 0) {
    // One sample does not fit: the next rungs of the ladder (Note [memory ladder]), activation
    // checkpointing measured where the model has blocks.
    std::optional<int64_t> checkpointed;
    if (ctx.checkpointing == ActivationCheckpointing::kOff && ctx.model->has_blocks()) {
      ctx.model->set_activation_checkpointing(ActivationCheckpointing::kBlocks);
      checkpointed = probe(1);
      ctx.model->set_activation_checkpointing(ActivationCheckpointing::kOff);
    }
    failure = "one sample runs out of memory in forward and backward; " +
              memory_ladder(ctx, usable_memory(ctx), checkpointed);
  }
  agree_no_failure(*ctx.control, failure, "micro_batch auto", "train.micro_batch");
  at::Tensor smallest = at::tensor({micro}, at::kLong);
  ctx.control->all_reduce(smallest, ReduceOp::kMin);
  micro = smallest.item<int64_t>();
  log::info("micro_batch auto: " + std::to_string(micro) + " samples per forward/backward (" +
            std::to_string(rank_batch / micro) + " accumulation steps), peak " +
            (before.total > 0 ? gib(peak) + " of " + format("%.1f GiB", before.total / 1073741824.0)
                              : std::string("memory not measured on CPU")));
  return micro;
}

}  // namespace dtrain::detail
