// The loop's engines alone, on a one-rank communicator in process (no MPI, no launcher): the
// eager step with the fault injector (an out-of-memory error shrinks the micro-batch and the step
// is redone on the same samples: the same parameters as a run that never failed), the request
// agreement with one rank, and the loss window's resume arithmetic (a checkpoint of 2 ranks read
// on 1, a non-finite loss named by its step), and the memory ladder (Note [memory ladder]): the
// memory by kind, what an out-of-memory error at one sample names, mid-run and in
// `micro_batch: auto`, and the start-up's one line when one of its allocations runs out of
// memory (the fault injector's before_start_up).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/faults.h"
#include "dtrain/models.h"
#include "fault_injectors.h"
#include "local_comm.h"
#include "runtime/watchdog.h"
#include "tiny_gpt.h"
#include "train/context_build.h"
#include "train/eager_step.h"
#include "train/loss_window.h"
#include "train/memory_ladder.h"
#include "train/recovery.h"
#include "train/requests.h"
#include "train/start_up_memory.h"
#include "train/step_context.h"

namespace dtrain::detail {
namespace {

using test::OomAlways;
using test::OomAtStartUp;
using test::OomOnce;

const char* kCfg = R"(
run: {dir: "", seed: 7, log_every: 0, threads: 1, quiet: true}
model: {name: mlp, hidden: [16]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 256,
       synthetic_test_size: 0, synthetic_features: 6, synthetic_classes: 3}
train: {epochs: 1, global_batch: 32, micro_batch: 8, optimizer: adamw, lr: 0.01}
)";

// One rank's engine over a local communicator: the model, its step context, the micro-batch.
// `faults`: asked from the start-up on.
struct Engine {
  explicit Engine(const std::vector<std::string>& overrides = {}, FaultInjector* faults = nullptr)
      : cfg(Config::from_string(kCfg, "engines", overrides)), watchdog(60, 0) {
    cfg.resolve(1);
    data = make_datasets(cfg.data, cfg.run.seed);
    at::manual_seed(static_cast<uint64_t>(cfg.run.seed));
    model = make_model(cfg.model.name, cfg.model, data.train->spec());
    ctx.model = model.get();
    ctx.watchdog = &watchdog;
    ctx.phases = &phases;
    ctx.faults = faults;
    build_step_context(ctx, cfg, comm, comm, data.train->size(), -1);
    micro = std::make_unique<MicroBatch>(cfg.resolved.rank_batch, cfg.resolved.micro_batch,
                                         cfg.train.global_batch);
    window = std::make_unique<LossWindow>(ctx, 0);
    eager = std::make_unique<EagerStep>(ctx, *micro, *window);
  }
  // Steps 0..n-1, each on its 32 samples of the training set, in order.
  void train(int64_t n) {
    for (int64_t s = 0; s < n; ++s) {
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < 32; ++i) idx.push_back(s * 32 + i);
      eager->run(data.train->get(idx), s, cfg.train.lr);
    }
  }
  double distance(const Engine& other) const {
    double worst = 0;
    for (size_t i = 0; i < ctx.params.size(); ++i)
      worst = std::max(worst, (ctx.params[i] - other.ctx.params[i]).norm().item<double>() /
                                  other.ctx.params[i].norm().item<double>());
    return worst;
  }

  Config cfg;
  test::LocalCommunicator comm;
  Watchdog watchdog;
  PhaseTimes phases;
  Splits data;
  std::shared_ptr<Model> model;
  StepContext ctx;
  std::unique_ptr<MicroBatch> micro;
  std::unique_ptr<LossWindow> window;
  std::unique_ptr<EagerStep> eager;
};

TEST(Engines, OutOfMemoryShrinksTheMicroBatchAndRedoesTheStepOnTheSameSamples) {
  Engine clean, hit;
  OomOnce oom(2);
  hit.ctx.faults = &oom;
  clean.train(6);
  hit.train(6);
  EXPECT_EQ(clean.micro->size(), 8);
  EXPECT_EQ(hit.micro->size(), 4);  // about half, a divisor of the rank batch
  EXPECT_EQ(hit.micro->retries(), 1);
  EXPECT_EQ(hit.micro->accum_steps(), 8);
  Engine init;
  ASSERT_GT(clean.distance(init), 1e-2);  // training moved the parameters
  EXPECT_LT(hit.distance(clean), 1e-5);   // the same global batches, split finer
}

TEST(Engines, WithoutRecoveryAnOutOfMemoryStepIsMicroBatchDoesNotFit) {
  Engine e;
  e.micro = std::make_unique<MicroBatch>(32, 8, 32, /*recover=*/false);
  e.eager = std::make_unique<EagerStep>(e.ctx, *e.micro, *e.window);
  OomOnce oom(0);
  e.ctx.faults = &oom;
  try {
    e.train(1);
    FAIL() << "an out-of-memory step without recovery trained on";
  } catch (const MicroBatchDoesNotFit& x) {
    EXPECT_EQ(x.micro_batch(), 8);
    EXPECT_EQ(x.step(), 0);
  }
  EXPECT_EQ(e.micro->size(), 8);
}

TEST(Engines, OneRankAgreesOnItsRequestsAtOnce) {
  test::LocalCommunicator comm;
  RequestAgreement agree(comm);
  LoopControl local;
  EXPECT_FALSE(agree.at_step(local).stop());
  local.request_save("a hook");
  const Agreed saved = agree.at_step(local);  // one rank: the same boundary
  EXPECT_TRUE(saved.save());
  EXPECT_EQ(saved.save_by, 0);
  EXPECT_FALSE(saved.stop());
  EXPECT_FALSE(agree.at_step(local).save());  // requests are cleared once agreed
  local.request_stop("enough");
  const Agreed stopped = agree.now(local);
  EXPECT_TRUE(stopped.stop());
  EXPECT_EQ(stopped.stop_by, 0);
  EXPECT_EQ(stopped.signal, 0);
}

TEST(Engines, TheLossWindowOfTwoRanksResumesOnOneWithTheSameMean) {
  Engine e;
  LossWindow& window = *e.window;
  // Saved by 2 ranks after step 10: the window's 3 steps summed 12 over both ranks (a mean of 2).
  LoopPosition at;
  at.step = 10, at.window_loss = 12.0, at.window_steps = 3;
  window.restore(at, /*saved_world=*/2);
  EXPECT_EQ(window.steps(), 3);
  EXPECT_DOUBLE_EQ(window.total(), 6.0);  // one rank carries the 2-rank mean's share
  // Two more steps of loss 7 each: (6 + 14) / (3 + 2).
  for (int i = 0; i < 2; ++i) {
    window.add(at::scalar_tensor(7.0, at::kDouble));
    window.add_step();
  }
  EXPECT_DOUBLE_EQ(window.read(12), 4.0);
  EXPECT_EQ(window.steps(), 0);
  // The next window starts afresh; a non-finite loss names the first step it appeared at.
  window.add_step();
  window.add(at::scalar_tensor(std::nan(""), at::kDouble));
  try {
    window.read(13);
    FAIL() << "a nan loss was read as a number";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("the training loss is nan at step"), std::string::npos)
        << x.what();
    EXPECT_EQ(x.where(), "train.skip_nonfinite");
  }
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MemoryLadder, TheKindsAreTheParametersTheirGradientsAndTheOptimizerState) {
  Engine e;
  int64_t values = 0;
  for (const auto& p : e.ctx.params) values += p.numel();
  ASSERT_EQ(values, 6 * 16 + 16 + 16 * 3 + 3);  // mlp 6 -> 16 -> 3
  const MemoryKinds k = memory_kinds(e.ctx);
  EXPECT_EQ(k.weights, 4 * values);
  EXPECT_EQ(k.gradients, 4 * values);
  // AdamW: two fp32 moments per value, and a step count per parameter tensor.
  EXPECT_GE(k.optimizer_state, 2 * 4 * values);
  EXPECT_LE(k.optimizer_state, 2 * 4 * values + 8 * static_cast<int64_t>(e.ctx.params.size()));
  EXPECT_EQ(k.shards, 1);
}

TEST(MemoryLadder, OneSampleOutOfMemoryMidRunNamesTheSettingsThatFreeMemory) {
  Engine e;
  OomAlways oom;
  e.ctx.faults = &oom;
  try {
    e.train(1);
    FAIL() << "a step that runs out of memory at every size trained on";
  } catch (const Error& x) {
    const std::string w = x.what();
    EXPECT_EQ(x.where(), "train.micro_batch");
    EXPECT_TRUE(has(w, "out of memory even with a micro-batch of 1 sample at step 0")) << w;
    EXPECT_TRUE(has(w, "this rank holds weights 0.00 GiB, gradients 0.00 GiB, optimizer state"))
        << w;
    EXPECT_TRUE(has(w, "dist.shard_optimizer=true on N ranks")) << w;
    EXPECT_TRUE(has(w, "a smaller model (model.*)")) << w;
    EXPECT_FALSE(has(w, "train.activation_checkpointing")) << "an mlp has no blocks: " << w;
  }
  EXPECT_EQ(e.micro->size(), 1);
}

// The sharded optimizer's rung plans flat shards: the mlp's 163 values (tensors of 96, 16, 48 and
// 3) cut into 4 shards of at most 41 values, so each rank keeps 41/163 (25%) of the state and
// sharding frees 75% on every rank, whatever the tensors' sizes; with more ranks than values it
// would refuse, and is not offered. The next rung, the gradients sharded too (ZeRO-2), frees the
// same share of the gradients.
TEST(MemoryLadder, TheShardedOptimizersRungSaysWhatTheFullestShardKeeps) {
  Engine e;
  e.ctx.world = 4;
  const std::string four = memory_ladder(e.ctx, 0);
  EXPECT_TRUE(has(four, "dist.shard_optimizer=true (frees ")) << four;
  EXPECT_TRUE(has(four, "on each of the 4 ranks, 75%: each keeps the state of 25% of the values)"))
      << four;
  // 163 fp32 gradients are 652 bytes: 0.00 GiB at two decimals, so only the shares are checked.
  EXPECT_TRUE(has(four, "dist.shard_optimizer=gradients (frees the optimizer state as above, and "))
      << four;
  EXPECT_TRUE(
      has(four,
          " of gradients on each of the 4 ranks, 75%: past backward each keeps the averaged "
          "gradients of 25% of the values)"))
      << four;
  e.ctx.world = 164;  // more ranks than values: sharding would refuse, so it is not offered
  EXPECT_FALSE(has(memory_ladder(e.ctx, 0), "dist.shard_optimizer")) << memory_ladder(e.ctx, 0);
  e.ctx.world = 1;
  const std::string one = memory_ladder(e.ctx, 0);
  EXPECT_TRUE(has(one, "dist.shard_optimizer=true on N ranks (each keeps 1/N of the ")) << one;
  EXPECT_TRUE(has(one,
                  "dist.shard_optimizer=gradients on N ranks (each keeps 1/N of the optimizer "
                  "state and of the "))
      << one;
}

TEST(MemoryLadder, MicroBatchAutoMeasuresOneSampleWithActivationCheckpointing) {
  {
    Engine e(test::kTinyGpt);
    OomAlways oom;  // every size, with checkpointing too
    e.ctx.faults = &oom;
    try {
      find_micro_batch(e.ctx, *e.data.train, 32);
      FAIL() << "auto chose a micro-batch although one sample does not fit";
    } catch (const AgreedError& x) {
      const std::string w = x.what();
      EXPECT_EQ(x.where(), "train.micro_batch");
      EXPECT_TRUE(has(w, "one sample runs out of memory in forward and backward")) << w;
      EXPECT_TRUE(has(w,
                      "train.activation_checkpointing=blocks (each block keeps only its inputs, "
                      "for one more forward pass; measured: one sample runs out of memory with "
                      "it too)"))
          << w;
    }
  }
  Engine e(test::kTinyGpt);
  OomAlways oom(6);  // 32, 16, 8, 4, 2 and 1 samples; then 1 sample with checkpointing fits
  e.ctx.faults = &oom;
  try {
    find_micro_batch(e.ctx, *e.data.train, 32);
    FAIL() << "auto chose a micro-batch although one sample does not fit";
  } catch (const AgreedError& x) {
    EXPECT_TRUE(has(x.what(), "measured: one sample then fits")) << x.what();
  }
  // The probe leaves checkpointing as the config has it: off, the same outputs as before.
  EXPECT_TRUE(e.model->set_activation_checkpointing(ActivationCheckpointing::kOff));
}

std::string start_up_line(FaultInjector& faults, const std::vector<std::string>& overrides = {}) {
  try {
    Engine e(overrides, &faults);
  } catch (const StateDoesNotFit& x) {
    EXPECT_EQ(x.first_rank(), 0);
    return x.what();
  }
  return "no StateDoesNotFit";
}

// The mlp's 163 values: AdamW in fp32 is 16 bytes a value (weights, gradients, two moments); a
// gradient engine averaging in bf16 keeps 2 more, its buckets beside the fp32 gradients.
TEST(MemoryLadder, AStartUpAllocationThatRunsOutOfMemoryIsOneAgreedLine) {
  using S = FaultInjector::StartUp;
  const std::string sixteen = "this state takes 16 bytes per parameter value on each rank";
  OomAtStartUp move(S::kModelToDevice);
  std::string w = start_up_line(move);
  EXPECT_TRUE(
      has(w,
          "start-up failed on rank 0: out of memory moving the model to the device (injected "
          "out-of-memory error (fault injector)): the training state needs "))
      << w;
  EXPECT_TRUE(has(w, "no device limit is known on the CPU. Settings that free memory: ")) << w;
  EXPECT_TRUE(has(w, sixteen)) << w;
  EXPECT_EQ(move.asked.size(), 1u) << "nothing after the move is tried";
  OomAtStartUp state(S::kOptimizerState);
  w = start_up_line(state);
  EXPECT_TRUE(has(w, "start-up failed on rank 0: out of memory allocating the optimizer state"))
      << w;
  EXPECT_TRUE(has(w, sixteen)) << w;
  OomAtStartUp buckets(S::kGradientBuckets);
  w = start_up_line(buckets, {"dist.reduce_single_rank=true", "dist.grad_dtype=bf16"});
  EXPECT_TRUE(has(w, "start-up failed on rank 0: out of memory allocating the gradient buckets"))
      << w;
  EXPECT_TRUE(has(w, "this state takes 18 bytes per parameter value on each rank")) << w;
  EXPECT_EQ(buckets.asked.back(), S::kGradientBuckets) << "the optimizer state is not tried";
  // Built, the same settings hold what was planned.
  Engine e({"dist.reduce_single_rank=true", "dist.grad_dtype=bf16"});
  const int64_t values = 6 * 16 + 16 + 16 * 3 + 3;
  const MemoryKinds k = memory_kinds(e.ctx);
  const MemoryKinds p = planned_memory({values}, 4, state_settings(e.cfg, 1));
  EXPECT_EQ(k.buckets, 2 * values);
  EXPECT_EQ(p.buckets, k.buckets);
  EXPECT_EQ(p.weights + p.gradients, k.weights + k.gradients);
}

TEST(MemoryLadder, TheFirstOptimizerStepRunningOutOfMemoryIsOneAgreedLine) {
  OomAtStartUp oom(FaultInjector::StartUp::kFirstUpdate);
  Engine e({}, &oom);
  try {
    e.train(1);
    FAIL() << "the first optimizer step ran out of memory, and the step went on";
  } catch (const StateDoesNotFit& x) {
    const std::string w = x.what();
    EXPECT_TRUE(
        has(w,
            "start-up failed on rank 0: out of memory in the first optimizer step (injected "
            "out-of-memory error (fault injector)): the training state needs "))
        << w;
    EXPECT_TRUE(has(w, "this state takes 16 bytes per parameter value on each rank")) << w;
  }
  EXPECT_EQ(e.micro->size(), 8) << "the micro-batch does not shrink for the state";
}

}  // namespace
}  // namespace dtrain::detail
