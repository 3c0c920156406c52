// Out-of-memory recovery under mpirun: one chosen rank fails one chosen step (a FaultInjector);
// every rank abandons the step, halves the micro-batch, redoes it, and training ends with the
// same parameters as a run that never failed. A rank that runs out of memory at every size ends
// the job on every rank with one AgreedError that names it and the settings that free memory.
// Out of memory before the first step (Note [memory ladder]): one chosen rank runs out at one of
// the start-up's allocations (the injector given to the Trainer's constructor: the model to the
// device, the gradient buckets, the optimizer state, the output check, the first optimizer step);
// every rank ends at the same point with the same StateDoesNotFit, the failing rank's line
// ("start-up failed on rank R: out of memory <what> (<the allocator's words>): the training state
// needs ... on each rank before any activation (...). Settings that free memory: ..."), in
// bounded time: no rank is left in a collective; unsharded and with
// dist.shard_optimizer=gradients. Under --backend=nccl on the GPU with NCCL gradients
// (test::nccl_mode()).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/faults.h"
#include "dtrain/models.h"
#include "dtrain/trainer.h"

namespace dtrain {
namespace {

using test::OomAlways;
using test::OomAtStartUp;
using test::OomOnce;

const char* kCfg = R"(
run: {dir: "", seed: 11, log_every: 0, threads: 1, quiet: true}
model: {name: mlp, hidden: [16]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 256,
       synthetic_test_size: 0, synthetic_features: 6, synthetic_classes: 3, workers: 1}
train: {epochs: 1, max_steps: 6, global_batch: 32, optimizer: adamw, lr: 0.01, eval: false}
)";

struct TrainRun {
  std::vector<at::Tensor> params;
  TrainSummary summary;
};

// `victim` (a rank) fails step `step` once (always, with `always`); -1: nobody fails.
TrainRun train_with_oom(int victim, int64_t step, bool always = false) {
  test::RunSetup s = test::setup_run(kCfg, "<string>", {}, MPI_COMM_WORLD, 11, test::nccl_mode());
  Trainer trainer(s.cfg, s.gradients(), *s.comm, test::test_device(), s.model, s.data.train,
                  s.data.test);
  if (s.comm->rank() == victim)
    trainer.set_fault_injector(always
                                   ? std::shared_ptr<FaultInjector>(std::make_shared<OomAlways>())
                                   : std::make_shared<OomOnce>(step));
  const uint64_t hash_before = trainer.config().hash();
  TrainRun r;
  r.summary = trainer.fit();
  // The micro-batch recovery chose lives in the step engine: the config is unchanged.
  EXPECT_EQ(trainer.config().hash(), hash_before);
  for (const auto& p : s.model->parameters()) r.params.push_back(p.detach().cpu().clone());
  return r;
}

TEST(OomRecovery, InjectedOnOneRankSameParametersAsCleanRun) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int victim = world - 1;  // not rank 0, when there is another
  TrainRun clean = train_with_oom(-1, 0);
  TrainRun hit = train_with_oom(victim, 3);
  EXPECT_EQ(clean.summary.oom_retries, 0);
  EXPECT_EQ(hit.summary.oom_retries, 1);  // every rank redid the step, not just the victim
  EXPECT_EQ(hit.summary.micro_batch, clean.summary.micro_batch / 2);
  EXPECT_EQ(hit.summary.steps, clean.summary.steps);
  ASSERT_EQ(clean.params.size(), hit.params.size());
  for (size_t i = 0; i < clean.params.size(); ++i) {
    const double rel = (clean.params[i] - hit.params[i]).norm().item<double>() /
                       clean.params[i].norm().item<double>();
    EXPECT_LT(rel, 1e-5) << "parameter " << i;
  }
}

TEST(OomRecovery, OneSampleOutOfMemoryOnOneRankIsOneAgreedErrorNamingIt) {
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world < 2) GTEST_SKIP() << "needs 2 ranks: runs under mpirun -np 2 and -np 4";
  const int victim = world - 1;
  try {
    train_with_oom(victim, 0, /*always=*/true);
    ADD_FAILURE() << "rank " << victim
                  << " runs out of memory at every size, and the run trained on";
  } catch (const AgreedError& e) {
    // Every rank, the victim's peers too, throws the same error: printed once, by the victim.
    EXPECT_EQ(e.first_rank(), victim);
    EXPECT_EQ(e.where(), "train.micro_batch");
    const std::string w = e.what();
    EXPECT_NE(w.find("failed on rank " + std::to_string(victim) +
                     ": out of memory even with a micro-batch of 1 sample at step 0"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("Settings that free memory: "), std::string::npos) << w;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << ": not an AgreedError: " << e.what();
  }
}

struct Case {
  FaultInjector::StartUp stage;
  const char* says;
};

TEST(StartUpOom, OneRankOutOfMemoryAtAnyStartUpAllocationEndsEveryRankWithOneAgreedLine) {
  const test::World w;
  const int victim = w.size - 1;  // not rank 0, when there is another
  using S = FaultInjector::StartUp;
  const std::vector<Case> cases = {
      {S::kModelToDevice, "moving the model to the device"},
      {S::kGradientBuckets, "allocating the gradient buckets"},
      {S::kOptimizerState, "allocating the optimizer state"},
      {S::kOutputCheck, "running the model on one sample (the output check)"},
      {S::kFirstUpdate, "in the first optimizer step"}};
  for (const std::string shard : {"false", "gradients"}) {
    for (const Case& c : cases) {
      // With one rank no gradient engine is made: no bucket to run out on.
      if (c.stage == S::kGradientBuckets && w.size == 1) continue;
      const std::string name = std::string(c.says) + ", dist.shard_optimizer=" + shard;
      test::RunSetup s = test::setup_run(kCfg, "<string>", {"dist.shard_optimizer=" + shard},
                                         MPI_COMM_WORLD, 11, test::nccl_mode());
      const auto t0 = std::chrono::steady_clock::now();
      std::string line;
      try {
        std::shared_ptr<FaultInjector> faults;
        if (w.rank == victim) faults = std::make_shared<OomAtStartUp>(c.stage);
        Trainer trainer(s.cfg, s.gradients(), *s.comm, test::test_device(), s.model, s.data.train,
                        s.data.test, faults);
        trainer.fit();
        ADD_FAILURE() << name << ": rank " << victim
                      << " ran out of memory, and the run trained on";
      } catch (const AgreedError& e) {
        EXPECT_EQ(e.first_rank(), victim) << name;
        line = e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": rank " << w.rank << ": not an AgreedError: " << e.what();
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(seconds, 60.0) << name;
      const std::string expected = "start-up failed on rank " + std::to_string(victim) +
                                   ": out of memory " + c.says +
                                   " (injected out-of-memory error (fault injector)): the training "
                                   "state needs ";
      EXPECT_EQ(line.rfind(expected, 0), 0u) << name << ": " << line;
      EXPECT_NE(line.find(" on each rank before any activation (weights "), std::string::npos)
          << line;
      EXPECT_NE(line.find(". Settings that free memory: "), std::string::npos) << line;
      EXPECT_NE(line.find("a smaller model (model.*): this state takes "), std::string::npos)
          << line;
      if (w.size > 1 && shard == "false") {
        EXPECT_NE(line.find("dist.shard_optimizer=true (frees "), std::string::npos) << line;
      }
      if (w.size > 1 && shard == "gradients") {
        EXPECT_NE(line.find("(its shard of " + std::to_string(w.size) + ")"), std::string::npos)
            << line;
        EXPECT_EQ(line.find("dist.shard_optimizer="), std::string::npos)
            << "both rungs are taken: " << line;
      }
      // Every rank holds the one line, word for word.
      const std::vector<std::string> all = gather_strings(*s.comm, line);
      for (size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r], line) << name << ": rank " << r;
    }
  }
}

}  // namespace
}  // namespace dtrain
