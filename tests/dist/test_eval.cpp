// Evaluation of a sequence model: (N, T, V) logits score every token, on any world size.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"
#include "dtrain/trainer.h"

namespace dtrain {
namespace {

TEST(Evaluation, SequenceModelScoresEveryToken) {
  const char* yaml = R"(
run: {dir: "", seed: 2, log_every: 0, threads: 1}
model: {name: gpt, n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 32, seq_len: 8}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [8], synthetic_classes: 32,
       synthetic_size: 64, synthetic_test_size: 48, workers: 1}
train: {epochs: 1, max_steps: 1, global_batch: 16, optimizer: adamw, lr: 1.0e-9, eval: true}
)";
  test::RunSetup s = test::setup_run(yaml, "eval", {}, MPI_COMM_WORLD);
  Trainer trainer(s.cfg, *s.comm, *s.comm, at::kCPU, s.model, s.data.train, s.data.test);
  const EvalResult r = trainer.fit().eval;
  EXPECT_EQ(r.count, 48);  // sequences, each once over all ranks
  // An untrained GPT-2-initialized model predicts nearly uniformly: loss per token ~ ln(V).
  EXPECT_NEAR(r.loss, std::log(32.0), 0.1);
  EXPECT_GE(r.accuracy, 0.0);
  EXPECT_LE(r.accuracy, 0.2);  // near chance (1/32), far from 1
  // Every rank reports the same result.
  double mine[2] = {r.loss, r.accuracy}, lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo[0], hi[0]);
  EXPECT_EQ(lo[1], hi[1]);
}

}  // namespace
}  // namespace dtrain
