// The dist tier's equivalence harness: the base run (an MLP on synthetic classification), one
// training run on a communicator's ranks, and the comparison of N ranks with one rank. Shared by
// test_equivalence.cpp and test_sharded.cpp.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dist_support.h"
#include "dtrain/faults.h"
#include "dtrain/trainer.h"

namespace dtrain::test {

inline const char* const kBase = R"(
run: {dir: "", seed: 3, log_every: 0, threads: 1}
model: {name: mlp, hidden: [16, 8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 512,
       synthetic_test_size: 64, synthetic_features: 12, synthetic_classes: 5, workers: 1}
train: {epochs: 2, global_batch: 32, optimizer: sgd, lr: 0.05, momentum: 0.9, eval: true}
)";

struct Result {
  std::vector<at::Tensor> params;
  EvalResult eval;
  int64_t skipped_steps = 0;
  TrainSummary summary;
};

// Train with `comm` (its world size decides the per-rank batch) and return the parameters.
// `init_seed` >= 0 seeds the model's initialization instead of run.seed. Under nccl_mode() the
// world's runs average their gradients through NCCL. `faults`: the Trainer's fault injector.
inline Result train_with(MPI_Comm mpi_comm, const std::vector<std::string>& overrides,
                         int64_t init_seed = -1, at::Device device = test::test_device(),
                         std::shared_ptr<FaultInjector> faults = nullptr) {
  const bool nccl = test::nccl_mode() && mpi_comm == MPI_COMM_WORLD;
  test::RunSetup s = test::setup_run(kBase, "equivalence", overrides, mpi_comm, init_seed, nccl);
  Trainer trainer(s.cfg, s.gradients(), *s.comm, device, s.model, s.data.train, s.data.test);
  if (faults) trainer.set_fault_injector(faults);
  const TrainSummary summary = trainer.fit();
  Result r;
  for (const auto& p : s.model->parameters()) r.params.push_back(p.detach().cpu().clone());
  r.eval = summary.eval;
  r.skipped_steps = summary.skipped_steps;
  r.summary = summary;
  return r;
}

inline double max_relative_difference(const Result& a, const Result& b) {
  double worst = 0;
  EXPECT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size() && i < b.params.size(); ++i) {
    const double num = (a.params[i] - b.params[i]).norm().item<double>();
    const double den = std::max(b.params[i].norm().item<double>(), 1e-12);
    worst = std::max(worst, num / den);
  }
  return worst;
}

inline void expect_equivalent(const std::vector<std::string>& dist_overrides,
                              const std::vector<std::string>& ref_overrides) {
  Result dist = train_with(MPI_COMM_WORLD, dist_overrides);
  Result ref = train_with(MPI_COMM_SELF, ref_overrides);
  // Training must have moved the parameters, or the comparison proves nothing.
  Result init = train_with(MPI_COMM_SELF, {"train.max_steps=1", "train.lr=1e-12"});
  ASSERT_GT(max_relative_difference(ref, init), 1e-2);
  EXPECT_LT(max_relative_difference(dist, ref), 1e-5)
      << "world " << world_size() << " diverged from the single-rank reference";
  // Evaluation counts each test sample once, whatever the world size.
  EXPECT_EQ(dist.eval.count, 64);
  EXPECT_NEAR(dist.eval.loss, ref.eval.loss, 1e-5 * std::max(1.0, std::fabs(ref.eval.loss)));
  EXPECT_DOUBLE_EQ(dist.eval.accuracy, ref.eval.accuracy);
}

}  // namespace dtrain::test
