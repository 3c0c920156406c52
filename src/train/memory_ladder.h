// What a rank's memory holds, by kind, and the ladder of settings that free some of it when
// micro-batches alone do not fit (Note [memory ladder]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/step_context.h"

namespace dtrain::detail {

// This rank's memory by kind, in bytes: the trainable parameters (weights), their gradients
// (the same number of values, whether or not they are allocated at this moment; with
// dist.shard_optimizer=gradients, the shard's this rank keeps past backward: `gradient_shards`
// ranks share them) and the optimizer state this rank holds (its shard's with
// dist.shard_optimizer: `shards` ranks share it). What a step adds on top of them, the activations and the step's workspace, is the peak
// minus these.
struct MemoryKinds {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int shards = 1;
  int gradient_shards = 1;
  int64_t total() const { return weights + gradients + optimizer_state; }
};
MemoryKinds memory_kinds(const StepContext& ctx);

// The bytes a step may use on ctx's device: 90% of the device, or of its run.gpu_memory_fraction
// (0 on the CPU: unknown).
int64_t usable_memory(const StepContext& ctx);

// "weights 0.46 GiB, gradients 0.46 GiB, optimizer state 0.93 GiB"
std::string describe(const MemoryKinds& k);

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
//     gradients on each rank (the same share), with one rank that N ranks would keep 1/N;
//   - train.precision=bf16 where a CUDA run computes in fp32: activations take about half;
// and past them a smaller model (model.*) or sequence (data.seq_len). The run's diagnosis reports
// the same kinds at the peak (report.txt, "memory by kind").
// `device_usable`: the bytes a step may use on the device (0: unknown, e.g. on the CPU);
// `checkpointed_peak`: one sample's measured peak with activation checkpointing (-1: it ran out
// of memory too; none: not measured).
std::string memory_ladder(const StepContext& ctx, int64_t device_usable,
                          std::optional<int64_t> checkpointed_peak = std::nullopt);

}  // namespace dtrain::detail
