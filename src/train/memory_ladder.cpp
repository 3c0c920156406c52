#include "train/memory_ladder.h"

#include <vector>

#include "cuda/memory.h"
#include "dist/shard_plan.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

std::string percent(double share) { return format("%.0f%%", 100.0 * share); }

// The most values one of `world` ranks would keep with dist.shard_optimizer (a flat shard, as
// plan_shards() cuts them: 1/world of the values, rounded up), as a share of all of them; none
// where a rank would hold no value (sharding refuses it).
std::optional<double> kept_share(const std::vector<at::Tensor>& params, size_t world) {
  std::vector<int64_t> numels;
  int64_t total = 0;
  for (const at::Tensor& p : params) numels.push_back(p.numel()), total += p.numel();
  if (total == 0 || world < 1 || total < static_cast<int64_t>(world)) return std::nullopt;
  return static_cast<double>(plan_shards(numels, static_cast<int>(world)).largest()) / total;
}

}  // namespace

MemoryKinds memory_kinds(const StepContext& ctx) {
  MemoryKinds k;
  for (const at::Tensor& p : ctx.params) {
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    k.weights += bytes;
    k.gradients += bytes;  // a parameter's gradient has its dtype
  }
  if (ctx.optimizer) k.optimizer_state = ctx.optimizer->state_bytes();
  k.shards = ctx.shard ? ctx.world : 1;
  if (ctx.reducer && ctx.reducer->releases_buckets()) {
    if (const auto kept = kept_share(ctx.params, static_cast<size_t>(ctx.world))) {
      k.gradients = static_cast<int64_t>(static_cast<double>(k.gradients) * *kept);
      k.gradient_shards = ctx.world;
    }
  }
  return k;
}

int64_t usable_memory(const StepContext& ctx) {
  constexpr double kHeadroom = 0.10;  // as micro_batch: auto leaves for fragmentation and spikes
  const double total = static_cast<double>(memory_stats(ctx.device).total);
  const double share = ctx.memory_fraction > 0 ? ctx.memory_fraction : 1.0;
  return static_cast<int64_t>((1.0 - kHeadroom) * share * total);
}

std::string describe(const MemoryKinds& k) {
  std::string s = "weights " + gib(k.weights) + ", gradients " + gib(k.gradients);
  if (k.gradient_shards > 1) s += " (its shard of " + std::to_string(k.gradient_shards) + ")";
  s += ", optimizer state " + gib(k.optimizer_state);
  if (k.shards > 1) s += " (its shard of " + std::to_string(k.shards) + ")";
  return s;
}

std::string memory_ladder(const StepContext& ctx, int64_t device_usable,
                          std::optional<int64_t> checkpointed_peak) {
  const MemoryKinds k = memory_kinds(ctx);
  std::string out = "this rank holds " + describe(k) + " before any activation";
  if (device_usable > 0)
    out += ", of " + gib(device_usable) + " usable (" +
           (k.total() < device_usable ? gib(device_usable - k.total()) + " left for one sample's activations"
                                      : std::string("nothing left for activations")) + ")";
  std::vector<std::string> rungs;
  if (ctx.checkpointing == ActivationCheckpointing::kOff && ctx.model->has_blocks()) {
    std::string r = "train.activation_checkpointing=blocks (each block keeps only its inputs, for "
                    "one more forward pass";
    if (!checkpointed_peak)
      r += ")";
    else if (*checkpointed_peak < 0)
      r += "; measured: one sample runs out of memory with it too)";
    else if (device_usable > 0)
      r += "; measured: one sample then fits, peaking at " + gib(*checkpointed_peak) + ")";
    else
      r += "; measured: one sample then fits)";
    rungs.push_back(r);
  }
  if (!ctx.shard && k.optimizer_state > 0) {
    const auto state = static_cast<double>(k.optimizer_state);
    if (ctx.world > 1) {
      if (const auto kept = kept_share(ctx.params, static_cast<size_t>(ctx.world)))
        rungs.push_back("dist.shard_optimizer=true (frees " + gib(static_cast<int64_t>(state * (1 - *kept))) +
                        " of the " + gib(k.optimizer_state) + " of optimizer state on each of the " +
                        std::to_string(ctx.world) + " ranks, " + percent(1 - *kept) +
                        ": each keeps the state of " + percent(*kept) + " of the values)");
    } else {
      rungs.push_back("dist.shard_optimizer=true on N ranks (each keeps 1/N of the " +
                      gib(k.optimizer_state) + " of optimizer state)");
    }
  }
  if (k.gradient_shards == 1 && k.gradients > 0) {
    // ZeRO-2: the gradients past backward, beside the state (the rung above, or already taken).
    const std::string state = ctx.shard ? std::string() : "the optimizer state as above, and ";
    const auto grads = static_cast<double>(k.gradients);
    if (ctx.world > 1) {
      if (const auto kept = kept_share(ctx.params, static_cast<size_t>(ctx.world)))
        rungs.push_back("dist.shard_optimizer=gradients (frees " + state +
                        gib(static_cast<int64_t>(grads * (1 - *kept))) + " of the " + gib(k.gradients) +
                        " of gradients on each of the " + std::to_string(ctx.world) + " ranks, " +
                        percent(1 - *kept) + ": past backward each keeps the averaged gradients of " +
                        percent(*kept) + " of the values)");
    } else {
      rungs.push_back("dist.shard_optimizer=gradients on N ranks (each keeps 1/N of the optimizer state and of the " +
                      gib(k.gradients) + " of gradients past backward)");
    }
  }
  if (ctx.device.is_cuda() && ctx.precision == Precision::kFp32)
    rungs.push_back("train.precision=bf16 (activations take about half)");
  rungs.push_back("a smaller model (model.*) or sequence (data.seq_len)");
  out += ". Settings that free memory: ";
  for (size_t i = 0; i < rungs.size(); ++i) out += (i ? "; " : "") + rungs[i];
  return out;
}

}  // namespace dtrain::detail
