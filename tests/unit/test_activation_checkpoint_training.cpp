// train.activation_checkpointing through the Trainer, on a one-rank communicator in process with
// the gradient engine on (dist.reduce_single_rank: its hooks must fire for every parameter in the
// recomputed blocks): a few steps of GPT (dropout, two accumulated micro-batches) and of
// ResNet-18 reach the same parameters with the key on and off, and a model without blocks
// refuses `blocks` naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "dtrain/trainer.h"
#include "local_comm.h"
#include "model_support.h"
#include "test_support.h"

namespace dtrain {
namespace {

const char* kGpt = R"(
run: {dir: "", seed: 4, log_every: 0, threads: 1, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 32, seq_len: 8, dropout: 0.1}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [8], synthetic_classes: 32,
       synthetic_size: 64, synthetic_test_size: 16, workers: 1}
train: {epochs: 1, max_steps: 4, global_batch: 8, micro_batch: 4, optimizer: adamw, lr: 0.01,
        eval: true}
dist: {reduce_single_rank: true}
)";

const char* kResNet = R"(
run: {dir: "", seed: 4, log_every: 0, threads: 1, quiet: true}
model: {name: resnet18}
data: {format: synthetic, synthetic_task: images, synthetic_shape: [3, 16, 16],
       synthetic_classes: 4, synthetic_size: 32, synthetic_test_size: 8, workers: 1}
train: {epochs: 1, max_steps: 3, global_batch: 8, micro_batch: 4, optimizer: sgd, lr: 0.05,
        momentum: 0.9, eval: true}
dist: {reduce_single_rank: true}
)";

struct Trained {
  std::vector<at::Tensor> params, buffers;
  TrainSummary summary;
};

Trained fit(const char* yaml, const std::vector<std::string>& overrides) {
  Config cfg = Config::from_string(yaml, "activation_checkpointing", overrides);
  test::LocalCommunicator comm;
  cfg.resolve(comm.world());
  Splits data = make_datasets(cfg.data, cfg.run.seed);
  test::ensure_registered();
  at::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  auto model = make_model(cfg.model.name, cfg.model, data.train->spec());
  Trainer trainer(cfg, comm, comm, at::kCPU, model, data.train, data.test);
  Trained t;
  t.summary = trainer.fit();
  for (const auto& p : model->parameters()) t.params.push_back(p.detach().clone());
  for (const auto& b : model->buffers()) t.buffers.push_back(b.detach().clone());
  return t;
}

double difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const at::Tensor x = a[i].to(at::kDouble), y = b[i].to(at::kDouble);
    worst =
        std::max(worst, (x - y).norm().item<double>() / std::max(y.norm().item<double>(), 1e-12));
  }
  return worst;
}

void expect_same_training(const char* yaml) {
  const Trained on = fit(yaml, {"train.activation_checkpointing=blocks"});
  const Trained off = fit(yaml, {"train.activation_checkpointing=off"});
  const Trained init = fit(yaml, {"train.max_steps=1", "train.lr=1e-12"});
  ASSERT_EQ(on.summary.steps, off.summary.steps);
  ASSERT_GT(difference(off.params, init.params), 1e-3);  // training moved the parameters
  EXPECT_LT(difference(on.params, off.params), 1e-5);
  EXPECT_LT(difference(on.buffers, off.buffers), 1e-5);
  EXPECT_NEAR(on.summary.eval.loss, off.summary.eval.loss, 1e-5 * off.summary.eval.loss);
}

TEST(ActivationCheckpointTraining, GptWithDropoutAndMicroBatchesTrainsAlike) {
  expect_same_training(kGpt);
}

TEST(ActivationCheckpointTraining, ResNet18TrainsAlike) { expect_same_training(kResNet); }

TEST(ActivationCheckpointTraining, AModelWithoutBlocksRefusesBlocksNamingTheKey) {
  const std::string m = test::message_of([] {
    fit(R"(
run: {dir: "", seed: 4, log_every: 0, threads: 1, quiet: true}
model: {name: mlp, hidden: [8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 32,
       synthetic_test_size: 0, synthetic_features: 4, synthetic_classes: 3, workers: 1}
train: {epochs: 1, global_batch: 8, activation_checkpointing: blocks}
)",
        {});
  });
  EXPECT_NE(m.find("train.activation_checkpointing"), std::string::npos) << m;
  EXPECT_NE(m.find("no blocks"), std::string::npos) << m;
}

}  // namespace
}  // namespace dtrain
