// Out of memory before the first step (Note [memory ladder]): what the training state needs on
// each rank (planned_memory: the expected bytes are written here from the parameter counts, by
// the formulas of DeepSpeed's ZeRO paper: 4 bytes a value of fp32 weights, of gradients, of each
// AdamW moment; a shard holds ceil(values / N)), start-up's line against what the device allows
// with the settings that free memory, and the allocator's words. The line when the fault
// injector makes a start-up allocation run out of memory: on one rank in
// tests/unit/test_engines.cpp, on several under MPI in tests/dist/test_oom_recovery.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "test_support.h"
#include "train/memory_ladder.h"
#include "train/start_up_memory.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

using test::expect_all;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
std::string gib_of(double bytes) { return format("%.2f GiB", bytes / kGiB); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Issue 40's model: GPT, 24 layers of width C = 1536, vocabulary 50257 (the head tied to the
// token embedding), 1024 positions. A layer: two LayerNorms (2C each), attention's qkv (C x 3C
// and 3C) and projection (C x C and C), the MLP's (C x 4C and 4C) and (4C x C and C): 12C^2 + 13C.
int64_t gpt_24x1536() {
  const int64_t C = 1536, L = 24, V = 50257, T = 1024;
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

TEST(StateMemory, PlannedIsWeightsGradientsOptimizerStateAndBuckets) {
  const std::vector<int64_t> numels = {1000, 24, 7};
  const int64_t V = 1031;
  StateSettings s;  // AdamW, one rank, no gradient engine
  MemoryKinds k = planned_memory(numels, 4, s);
  EXPECT_EQ(k.weights, 4 * V);
  EXPECT_EQ(k.gradients, 4 * V);
  EXPECT_EQ(k.optimizer_state, 2 * 4 * V);  // two moments
  EXPECT_EQ(k.buckets, 0);
  EXPECT_EQ(k.total(), 16 * V);
  s.optimizer = OptimizerKind::kSgd;
  EXPECT_EQ(planned_memory(numels, 4, s).optimizer_state, 0);
  s.momentum = 0.9;
  EXPECT_EQ(planned_memory(numels, 4, s).optimizer_state, 4 * V);
  s.optimizer = OptimizerKind::kAdam;
  s.shard = ShardOptimizer::kState;  // one rank: nothing is sharded
  EXPECT_EQ(planned_memory(numels, 4, s).total(), 16 * V);

  s.world = 4;
  s.reducer = true;
  s.shard = ShardOptimizer::kOff;
  k = planned_memory(numels, 4, s);
  EXPECT_EQ(k.buckets, 0);  // fp32 buckets: each gradient is its span of its bucket
  EXPECT_EQ(k.total(), 16 * V);
  s.bucket_element_bytes = 2;  // dist.grad_dtype=bf16: bf16 buckets beside the fp32 gradients
  EXPECT_EQ(planned_memory(numels, 4, s).buckets, 2 * V);
  EXPECT_EQ(planned_memory(numels, 4, s).total(), 18 * V);
  s.shard = ShardOptimizer::kState;  // ZeRO-1: the state of the fullest shard
  k = planned_memory(numels, 4, s);
  EXPECT_EQ(k.optimizer_state, 2 * 4 * ceil_div(V, 4));
  EXPECT_EQ(k.shards, 4);
  EXPECT_EQ(k.gradients, 4 * V);
  EXPECT_EQ(k.buckets, 2 * V);
  s.shard = ShardOptimizer::kGradients;  // ZeRO-2: the gradients of the shard, no bucket kept
  k = planned_memory(numels, 4, s);
  EXPECT_EQ(k.gradients, 4 * ceil_div(V, 4));
  EXPECT_EQ(k.gradient_shards, 4);
  EXPECT_EQ(k.buckets, 0);
  EXPECT_EQ(k.total(), 4 * V + 3 * 4 * ceil_div(V, 4));
  // fp16 parameters (2 bytes): the state in their dtype, as zeros_like makes it.
  s = StateSettings{};
  EXPECT_EQ(planned_memory(numels, 2, s).total(), 8 * V);
}

// The run: one rank on an H100 (79.19 GiB) at run.gpu_memory_fraction 0.05.
TEST(StateMemory, TheLineSaysWhatTheStateNeedsAgainstWhatIsAllowed) {
  const int64_t V = gpt_24x1536();
  ASSERT_EQ(V, 758727168);  // "759M parameters"
  const std::vector<int64_t> numels = {V};
  const Allowance h100{static_cast<int64_t>(79.19 * kGiB), 0.05};
  const double allowed = std::floor(0.05 * static_cast<double>(h100.device));
  const std::string w = state_does_not_fit(
      "out of memory allocating the optimizer state (CUDA out of memory. "
      "Tried to allocate 28.00 MiB)",
      planned_memory(numels, 4, StateSettings{}), numels, 1, h100,
      /*cuda_fp32=*/true);
  expect_all(
      w, {"out of memory allocating the optimizer state (CUDA out of memory. Tried to allocate "
          "28.00 MiB): "
          "the training state needs " +
              gib_of(16.0 * V) + " on each rank before any activation (weights " + gib_of(4.0 * V) +
              ", gradients " + gib_of(4.0 * V) + ", optimizer state " + gib_of(8.0 * V) +
              "), against " + gib_of(allowed) +
              " allowed (run.gpu_memory_fraction 0.05 of the device's " +
              gib_of(static_cast<double>(h100.device)) + "). Settings that free memory: ",
          "a larger run.gpu_memory_fraction (the state alone takes " +
              format("%.3g", 16.0 * V / static_cast<double>(h100.device)) +
              " of the device, activations more)",
          "dist.shard_optimizer=true on N ranks (each keeps 1/N of the " + gib_of(8.0 * V) +
              " of optimizer state)",
          "dist.shard_optimizer=gradients on N ranks (each keeps 1/N of the optimizer state and of "
          "the " +
              gib_of(4.0 * V) + " of gradients past backward)",
          "a smaller model (model.*): this state takes 16 bytes per parameter value on each rank, "
          "so at most " +
              format("%.0f million", std::floor(allowed / 16 / 1e6)) + " parameters fit in the " +
              gib_of(allowed) + " allowed, before any activation",
          ". train.precision=bf16 frees none of it"});
  EXPECT_EQ(gib_of(allowed), "3.96 GiB");  // the figure
  EXPECT_EQ(w.find("activation_checkpointing"), std::string::npos) << "frees no state: " << w;

  // Four ranks averaging bf16 gradients: the buckets besides; each sharding rung says what it
  // frees.
  StateSettings four;
  four.world = 4;
  four.reducer = true;
  four.bucket_element_bytes = 2;
  const MemoryKinds k = planned_memory(numels, 4, four);
  const double kept = static_cast<double>(ceil_div(V, 4)) / static_cast<double>(V);
  const std::string f =
      state_does_not_fit("out of memory allocating the gradient buckets (x)", k, numels, 4,
                         Allowance{static_cast<int64_t>(79.19 * kGiB), 0}, false);
  expect_all(f,
             {"the training state needs " + gib_of(18.0 * V) + " on each rank",
              ", gradient buckets " + gib_of(2.0 * V) + "), against " +
                  gib_of(std::floor(79.19 * kGiB)) + " allowed (the device's memory)",
              "dist.shard_optimizer=true (frees " + gib_of(std::floor(8.0 * V * (1 - kept))) +
                  " of the " + gib_of(8.0 * V) + " of optimizer state on each of the 4 ranks, 75%",
              "dist.shard_optimizer=gradients (frees the optimizer state as above, and " +
                  gib_of(std::floor(4.0 * V * (1 - kept))) + " of the " + gib_of(4.0 * V) +
                  " of gradients on each of the 4 ranks, 75%: past backward each keeps the "
                  "averaged gradients "
                  "of 25% of the values, and the " +
                  gib_of(2.0 * V) +
                  " of gradient buckets beside them, each "
                  "made when its gradients are ready and released once sent)",
              "this state takes 18 bytes per parameter value on each rank"});
  EXPECT_EQ(f.find("run.gpu_memory_fraction"), std::string::npos) << "none is set: " << f;
  EXPECT_EQ(f.find("train.precision"), std::string::npos) << "not a CUDA fp32 run: " << f;

  // The CPU: no device limit to compare with, and no count of what would fit.
  const std::string c = state_does_not_fit(
      "out of memory x", planned_memory(numels, 4, StateSettings{}), numels, 1, Allowance{}, false);
  expect_all(
      c, {"before any activation (weights ", "); no device limit is known on the CPU. Settings",
          "a smaller model (model.*): this state takes 16 bytes per parameter value on each rank"});
  EXPECT_EQ(c.find("at most"), std::string::npos) << c;
}

TEST(StateMemory, TheAllocatorsWordsAreItsFirstSentenceAndTheSize) {
  const std::runtime_error cuda(
      "CUDA out of memory. Tried to allocate 28.00 MiB. GPU 0 has a total capacity of 79.19 GiB of "
      "which 75.1 "
      "GiB is free. Of the allocated memory 3.93 GiB is allocated by PyTorch. If reserved but "
      "unallocated memory "
      "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
      "fragmentation.\nframe #0");
  EXPECT_EQ(allocator_words(cuda), "CUDA out of memory. Tried to allocate 28.00 MiB");
  const std::runtime_error cpu(
      "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: "
      "you tried to "
      "allocate 4096 bytes. Error code 12 (Cannot allocate memory)\nException raised from ...");
  EXPECT_EQ(allocator_words(cpu),
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 4096 bytes. "
            "Error code 12 (Cannot allocate memory)");
  EXPECT_EQ(allocator_words(std::runtime_error(std::string(300, 'x'))),
            std::string(200, 'x') + "...");
}

}  // namespace
}  // namespace dtrain::detail
