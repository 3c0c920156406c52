#include "train/memory_ladder.h"

#include <cmath>
#include <vector>

#include "cuda/memory.h"
#include "dist/shard_plan.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

std::string percent(double share) { return format("%.0f%%", 100.0 * share); }

int64_t sum(const std::vector<int64_t>& numels) {
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  return total;
}

// The most values one of `world` ranks would keep with dist.shard_optimizer (a flat shard, as
// plan_shards() cuts them: 1/world of the values, rounded up), as a share of all of them; none
// where a rank would hold no value (sharding refuses it).
std::optional<double> kept_share(const std::vector<int64_t>& numels, size_t world) {
  const int64_t total = sum(numels);
  if (total == 0 || world < 1 || total < static_cast<int64_t>(world)) return std::nullopt;
  return static_cast<double>(plan_shards(numels, static_cast<int>(world)).largest()) / total;
}

std::vector<int64_t> numels_of(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> numels;
  for (const at::Tensor& p : params) numels.push_back(p.numel());
  return numels;
}

// The sharding rungs: the optimizer state (unless already sharded), then the gradients too
// (ZeRO-2, unless already taken), which also frees the gradient engine's buckets.
void sharding_rungs(const MemoryKinds& k, const std::vector<int64_t>& numels, int world,
                    std::vector<std::string>& rungs) {
  const bool sharded = k.shards > 1;
  if (!sharded && k.optimizer_state > 0) {
    const auto state = static_cast<double>(k.optimizer_state);
    if (world > 1) {
      if (const auto kept = kept_share(numels, static_cast<size_t>(world)))
        rungs.push_back("dist.shard_optimizer=true (frees " +
                        gib(static_cast<int64_t>(state * (1 - *kept))) + " of the " +
                        gib(k.optimizer_state) + " of optimizer state on each of the " +
                        std::to_string(world) + " ranks, " + percent(1 - *kept) +
                        ": each keeps the state of " + percent(*kept) + " of the values)");
    } else {
      rungs.push_back("dist.shard_optimizer=true on N ranks (each keeps 1/N of the " +
                      gib(k.optimizer_state) + " of optimizer state)");
    }
  }
  if (k.gradient_shards == 1 && k.gradients > 0) {
    // ZeRO-2: the gradients past backward, beside the state (the rung above, or already taken).
    const std::string state = sharded ? std::string() : "the optimizer state as above, and ";
    const std::string buckets = k.buckets > 0
                                    ? ", and the " + gib(k.buckets) +
                                          " of gradient buckets beside them, each made "
                                          "when its gradients are ready and released once sent"
                                    : std::string();
    const auto grads = static_cast<double>(k.gradients);
    if (world > 1) {
      if (const auto kept = kept_share(numels, static_cast<size_t>(world)))
        rungs.push_back("dist.shard_optimizer=gradients (frees " + state +
                        gib(static_cast<int64_t>(grads * (1 - *kept))) + " of the " +
                        gib(k.gradients) + " of gradients on each of the " + std::to_string(world) +
                        " ranks, " + percent(1 - *kept) +
                        ": past backward each keeps the averaged gradients of " + percent(*kept) +
                        " of the values" + buckets + ")");
    } else {
      rungs.push_back(
          "dist.shard_optimizer=gradients on N ranks (each keeps 1/N of the optimizer state and of "
          "the " +
          gib(k.gradients) + " of gradients past backward)");
    }
  }
}

std::string joined(const std::vector<std::string>& rungs) {
  std::string out = ". Settings that free memory: ";
  for (size_t i = 0; i < rungs.size(); ++i) out += (i ? "; " : "") + rungs[i];
  return out;
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
  if (!ctx.data_parallel) return k;  // not built yet
  const DataParallel& dp = *ctx.data_parallel;
  k.shards = dp.optimizer_shards();
  k.buckets = dp.bucket_bytes();
  if (dp.releases_buckets()) {
    if (const auto kept = kept_share(numels_of(ctx.params), static_cast<size_t>(ctx.world))) {
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

int64_t Allowance::bytes() const {
  return static_cast<int64_t>(static_cast<double>(device) * (fraction > 0 ? fraction : 1.0));
}

Allowance allowance(const StepContext& ctx) {
  Allowance a;
  a.device = memory_stats(ctx.device).total;
  a.fraction = ctx.memory_fraction;
  return a;
}

std::string describe(const MemoryKinds& k) {
  std::string s = "weights " + gib(k.weights) + ", gradients " + gib(k.gradients);
  if (k.gradient_shards > 1) s += " (its shard of " + std::to_string(k.gradient_shards) + ")";
  s += ", optimizer state " + gib(k.optimizer_state);
  if (k.shards > 1) s += " (its shard of " + std::to_string(k.shards) + ")";
  if (k.buckets > 0) s += ", gradient buckets " + gib(k.buckets);
  return s;
}

MemoryKinds planned_memory(const std::vector<int64_t>& numels, int64_t element_bytes,
                           const StateSettings& s) {
  const int64_t values = sum(numels);
  const bool sharded = s.world > 1 && s.shard != ShardOptimizer::kOff && values >= s.world;
  const int64_t fullest = sharded ? plan_shards(numels, s.world).largest() : values;
  int per_value = 2;  // Adam, AdamW: the two moments
  if (s.optimizer == OptimizerKind::kSgd) per_value = s.momentum != 0 ? 1 : 0;
  MemoryKinds k;
  k.weights = values * element_bytes;
  k.gradients = values * element_bytes;
  k.optimizer_state = per_value * fullest * element_bytes;
  k.shards = sharded ? s.world : 1;
  if (sharded && s.shard == ShardOptimizer::kGradients) {
    k.gradients = fullest * element_bytes;
    k.gradient_shards = s.world;
  } else if (s.reducer && s.bucket_element_bytes > 0 && s.bucket_element_bytes != element_bytes) {
    k.buckets =
        values * s.bucket_element_bytes;  // beside the gradients; else they are the gradients
  }
  return k;
}

std::string memory_ladder(const StepContext& ctx, int64_t device_usable,
                          std::optional<int64_t> checkpointed_peak) {
  const MemoryKinds k = memory_kinds(ctx);
  std::string out = "this rank holds " + describe(k) + " before any activation";
  if (device_usable > 0)
    out += ", of " + gib(device_usable) + " usable (" +
           (k.total() < device_usable
                ? gib(device_usable - k.total()) + " left for one sample's activations"
                : std::string("nothing left for activations")) +
           ")";
  std::vector<std::string> rungs;
  if (ctx.checkpointing == ActivationCheckpointing::kOff && ctx.model->has_blocks()) {
    std::string r =
        "train.activation_checkpointing=blocks (each block keeps only its inputs, for "
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
  const std::vector<int64_t> numels = numels_of(ctx.params);
  sharding_rungs(k, numels, ctx.world, rungs);
  if (ctx.device.is_cuda() && ctx.precision == Precision::kFp32)
    rungs.push_back("train.precision=bf16 (activations take about half)");
  rungs.push_back("a smaller model (model.*) or sequence (data.seq_len)");
  return out + joined(rungs);
}

std::string state_does_not_fit(const std::string& ran_out, const MemoryKinds& needs,
                               const std::vector<int64_t>& numels, int world,
                               const Allowance& allowed, bool cuda_fp32) {
  const int64_t values = sum(numels), limit = allowed.bytes();
  std::string out = ran_out + ": the training state needs " + gib(needs.total()) +
                    " on each rank before any activation (" + describe(needs) + ")";
  if (limit > 0)
    out += ", against " + gib(limit) + " allowed (" +
           (allowed.fraction > 0 ? "run.gpu_memory_fraction " + format("%g", allowed.fraction) +
                                       " of the device's " + gib(allowed.device)
                                 : std::string("the device's memory")) +
           ")";
  else
    out += "; no device limit is known on the CPU";
  std::vector<std::string> rungs;
  if (limit > 0 && allowed.fraction > 0 && allowed.fraction < 1)
    rungs.push_back(
        "a larger run.gpu_memory_fraction (the state alone takes " +
        format("%.3g", static_cast<double>(needs.total()) / static_cast<double>(allowed.device)) +
        " of the device, activations more)");
  sharding_rungs(needs, numels, world, rungs);
  std::string smaller = "a smaller model (model.*)";
  if (values > 0) {
    const double per_value = static_cast<double>(needs.total()) / static_cast<double>(values);
    smaller += ": this state takes " + format("%.3g", per_value) +
               " bytes per parameter value on each rank";
    if (limit > 0) {
      const double fit = std::floor(static_cast<double>(limit) / per_value);
      smaller +=
          ", so at most " +
          (fit >= 1e6 ? format("%.0f million", std::floor(fit / 1e6)) : format("%.0f", fit)) +
          " parameters fit in the " + gib(limit) + " allowed, before any activation";
    }
  }
  rungs.push_back(smaller);
  out += joined(rungs);
  if (cuda_fp32)
    out +=
        ". train.precision=bf16 frees none of it: autocast keeps the weights, gradients and "
        "optimizer state in fp32 (it halves the activations)";
  return out;
}

}  // namespace dtrain::detail
