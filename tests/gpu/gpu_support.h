// What the gpu tier's tests share: the GPU, one training run on a device (its parameters on the
// CPU and its summary), the largest relative parameter difference of two runs, a small MLP config
// and the graph-against-eager check. The tier's main (tests/gpu/main.cpp) skips without CUDA.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cuda/fused_loss.h"
#include "cuda/memory.h"
#include "dist/reducer.h"
#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/runtime.h"
#include "dtrain/trainer.h"
#include "telemetry/profiler.h"
#include "tensor_compare.h"  // kGpu

namespace dtrain::test {

struct TrainRun {
  std::vector<at::Tensor> params;  // on the CPU
  TrainSummary summary;
};

inline TrainRun train(const std::string& yaml, const std::vector<std::string>& overrides,
                      at::Device dev, Communicator* comm_in = nullptr) {
  Config cfg = Config::from_string(yaml, "gpu-test", overrides);
  auto own = make_mpi_communicator(MPI_COMM_SELF);
  Communicator& comm = comm_in ? *comm_in : *own;
  cfg.resolve(comm.world());
  Splits data = make_datasets(cfg.data, cfg.run.seed);
  at::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  auto model = make_model(cfg.model.name, cfg.model, data.train->spec());
  Trainer trainer(cfg, comm, *own, dev, model, data.train, data.test);
  TrainRun r;
  r.summary = trainer.fit();
  for (const auto& p : model->parameters()) r.params.push_back(p.detach().cpu().clone());
  return r;
}

inline double max_rel(const TrainRun& a, const TrainRun& b) {
  double worst = 0;
  for (size_t i = 0; i < a.params.size(); ++i)
    worst = std::max(worst, (a.params[i] - b.params[i]).norm().item<double>() /
                                std::max(1e-12, b.params[i].norm().item<double>()));
  return worst;
}

inline const char* kMlp = R"(
run: {dir: "", seed: 5, log_every: 0, quiet: true}
model: {name: mlp, hidden: [64, 32]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 1024,
       synthetic_test_size: 256, synthetic_features: 20, synthetic_classes: 4, workers: 2}
train: {epochs: 1, max_steps: 20, global_batch: 64, optimizer: adamw, lr: 0.003}
)";

// ---- CUDA graph of the whole step: same parameters as eager steps ----------------------------
inline void expect_graph_matches_eager(const std::string& yaml,
                                       const std::vector<std::string>& extra, double tol) {
  at::globalContext().setAllowTF32CuBLAS(false);
  std::vector<std::string> on = extra, off = extra;
  on.push_back("train.cuda_graph=on");
  off.push_back("train.cuda_graph=off");
  TrainRun graph = train(yaml, on, kGpu);
  TrainRun eager = train(yaml, off, kGpu);
  EXPECT_EQ(graph.summary.step_mode.rfind("CUDA graph", 0), 0u) << graph.summary.step_mode;
  EXPECT_EQ(eager.summary.step_mode, "eager");
  // Training moved the parameters, or the comparison proves nothing.
  TrainRun init =
      train(yaml, {"train.max_steps=1", "train.lr=1e-12", "train.cuda_graph=off"}, kGpu);
  ASSERT_GT(max_rel(eager, init), 1e-2);
  EXPECT_LT(max_rel(graph, eager), tol);
  EXPECT_NEAR(graph.summary.last_loss, eager.summary.last_loss,
              tol * std::max(1.0, std::fabs(eager.summary.last_loss)));
}

}  // namespace dtrain::test
