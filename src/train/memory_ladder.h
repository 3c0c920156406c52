// What a rank's memory holds, by kind, and the ladder of settings that free some of it when
// micro-batches alone do not fit (Note [memory ladder]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/step_context.h"

namespace dtrain::detail {

// This rank's memory by kind, in bytes: the trainable parameters (weights), their gradients
// (the same number of values, whether or not they are allocated at this moment; with
// dist.shard_optimizer=gradients, the shard's this rank keeps past backward: `gradient_shards`
// ranks share them), the optimizer state this rank holds (its shard's with
// dist.shard_optimizer: `shards` ranks share it) and the gradient engine's bucket buffers where
// they are not the gradients themselves: in the parameters' dtype each gradient is its span of
// its bucket (Note [bucket views]), so they count as gradients; of another dtype
// (dist.grad_dtype=bf16 with fp32 parameters) they are kept beside autograd's gradients (none
// with one rank, or with dist.shard_optimizer=gradients, which makes each when its gradients are
// ready and releases it once sent). What a step adds on top of them, the activations and the
// step's workspace, is the peak minus these.
struct MemoryKinds {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t buckets = 0;
  int shards = 1;
  int gradient_shards = 1;
  int64_t total() const { return weights + gradients + optimizer_state + buckets; }
};
MemoryKinds memory_kinds(const StepContext& ctx);

// The bytes a step may use on ctx's device: 90% of the device, or of its run.gpu_memory_fraction
// (0 on the CPU: unknown).
int64_t usable_memory(const StepContext& ctx);

// What a rank may allocate on its device: the device's memory, or run.gpu_memory_fraction of it.
struct Allowance {
  int64_t device = 0;     // the device's memory in bytes (0: unknown, e.g. the CPU)
  double fraction = 0;    // run.gpu_memory_fraction (0: the whole device)
  int64_t bytes() const;  // 0: unknown
};
Allowance allowance(const StepContext& ctx);

// "weights 0.46 GiB, gradients 0.46 GiB, optimizer state 0.93 GiB" (", gradient buckets 0.46
// GiB" when there are any).
std::string describe(const MemoryKinds& k);

// What the training state needs on each rank before any activation, from the parameters' sizes
// and the settings alone (start-up's estimate, made whether or not it could be allocated):
// weights and gradients of every trainable value at `element_bytes`; the optimizer state (AdamW
// and Adam two values per value, SGD one with momentum, none without; their step counts aside)
// of every value, or with the state sharded (dist.shard_optimizer on several ranks) of the
// fullest shard, ceil(values / world); with dist.shard_optimizer=gradients the gradients of the
// fullest shard and no buckets kept; else with a gradient engine whose buckets hold another
// dtype (`bucket_element_bytes`, dist.grad_dtype's; 0: the parameters'), buckets of every value.
struct StateSettings {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double momentum = 0;
  int world = 1;
  ShardOptimizer shard = ShardOptimizer::kOff;  // as in effect: off with one rank
  bool reducer = false;                         // several ranks, or dist.reduce_single_rank
  int64_t bucket_element_bytes = 0;
};
MemoryKinds planned_memory(const std::vector<int64_t>& numels, int64_t element_bytes,
                           const StateSettings& s);

// Note [memory ladder]: when a batch does not fit, dtrain first splits it into micro-batches
// (train.micro_batch: auto, or the out-of-memory recovery in the middle of a run). When one sample
// does not fit either, the next rungs are the settings below, each named with what it frees:
//   - train.activation_checkpointing=blocks (models with blocks: GPT, ResNet): a block keeps only
//     its inputs, at the cost of one more forward pass; `micro_batch: auto` measures one sample's
//     peak with it (`checkpointed_peak`), so the advice says whether it fits;
//   - dist.shard_optimizer=true: each of N ranks keeps the state of 1/N of the values (flat
//     shards, dist/shard_plan.h), and the advice says what that frees on each rank; with one
//     rank, that N ranks would keep 1/N each; not offered where a rank would hold no value;
//   - dist.shard_optimizer=gradients (ZeRO-2): besides, past backward each rank keeps the
//     averaged gradients of its shard only, and the advice says what that frees of the
//     gradients on each rank (the same share), with one rank that N ranks would keep 1/N; bf16
//     buckets kept beside the gradients go too (each lives from its fill to its send);
//   - train.precision=bf16 where a CUDA run computes in fp32: activations take about half;
// and past them a smaller model (model.*) or sequence (data.seq_len). The run's diagnosis reports
// the same kinds at the peak (report.txt, "memory by kind").
// When the training state itself does not fit, no micro-batch helps: out of memory anywhere in
// the start-up (train/start_up_memory.h: the model moved to the device, the gradient buckets and
// a sharded optimizer's buffers, the optimizer state, the one-sample output check, the first
// optimizer step; and the first step's forward and backward, or micro_batch auto's, where what
// the state holds is more than the device allows) is kept on the rank that ran out, agreed over
// the ranks before the next collective, and every rank ends with the first failing rank's line
// (state_does_not_fit): what the state needs on each rank before any activation (planned from
// the parameter counts and the settings before it is allocated, measured after) against what
// the device allows (its memory, or run.gpu_memory_fraction of it), and the rungs that free
// state (activation checkpointing frees none, bf16 autocast neither: it is said so).
// `device_usable`: the bytes a step may use on the device (0: unknown, e.g. on the CPU);
// `checkpointed_peak`: one sample's measured peak with activation checkpointing (-1: it ran out
// of memory too; none: not measured).
std::string memory_ladder(const StepContext& ctx, int64_t device_usable,
                          std::optional<int64_t> checkpointed_peak = std::nullopt);

// Start-up's out-of-memory line (Note [memory ladder]): `ran_out` says what ran out of memory
// ("out of memory allocating the optimizer state (<the allocator's words>)"), then what the
// state `needs` on each rank before any activation against what `allowed` lets it have, and the
// settings that free some of it, each with what it frees: a larger run.gpu_memory_fraction where
// one is set, the sharding rungs as above, a smaller model (its bytes per parameter value, and
// how many parameters fit in what is allowed); `cuda_fp32`: the note that train.precision=bf16
// frees none of it.
// `numels`: the trainable parameters' values; `world`: the ranks. Pure.
std::string state_does_not_fit(const std::string& ran_out, const MemoryKinds& needs,
                               const std::vector<int64_t>& numels, int world,
                               const Allowance& allowed, bool cuda_fp32);

}  // namespace dtrain::detail
