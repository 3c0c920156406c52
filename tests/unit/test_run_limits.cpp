// Settings that do not fit the data or the machine, caught before training: a loss for the
// other kind of data, step and sample counts past int64, and data or plans larger than the host's
// memory. Each is an Error naming the keys. Expected limits come from int64's range and the
// sizes' formulas.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <new>
#include <string>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"
#include "train/loss.h"
#include "train/plan.h"
#include "util/host_memory.h"

namespace {

using dtrain::test::message_of;

using dtrain::test::expect_all;

TEST(RunLimits, LossMustFitTheKindOfData) {
  dtrain::DataSpec classes;
  classes.num_classes = 10;
  dtrain::DataSpec regression;
  regression.target_dim = 1;
  using dtrain::LossKind;
  using dtrain::detail::check_loss_fits;
  expect_all(message_of([&] { check_loss_fits(LossKind::kMse, classes, "idx x.gz"); }),
             {"train.loss", "mse", "classification with 10 classes", "idx x.gz"});
  expect_all(message_of([&] {
               check_loss_fits(LossKind::kCrossEntropy, regression, "synthetic regression");
             }),
             {"train.loss", "cross_entropy", "regression with 1 target", "synthetic regression"});
  EXPECT_NO_THROW(check_loss_fits(LossKind::kCrossEntropy, classes, ""));
  EXPECT_NO_THROW(check_loss_fits(LossKind::kMse, regression, ""));
  // At the loss itself too: mse never broadcasts class ids over logits.
  expect_all(message_of([] {
               dtrain::detail::compute_loss(LossKind::kMse, at::zeros({4, 3}),
                                            at::zeros({4}, at::kLong), false);
             }),
             {"train.loss", "class ids"});
}

// Once the model is built: its outputs for one sample against the data's classes or targets.
TEST(RunLimits, ModelOutputsMustFitTheData) {
  using dtrain::detail::check_outputs_fit;
  dtrain::DataSpec classes;
  classes.num_classes = 10;
  const at::Tensor ids = at::zeros({1}, at::kLong);
  EXPECT_NO_THROW(check_outputs_fit(classes, at::zeros({1, 10}), ids, "m", "d"));
  EXPECT_NO_THROW(
      check_outputs_fit(classes, at::zeros({1, 12}), ids, "m", "d"));  // more scores: fine
  // Fewer scores than classes: class ids 7..9 would index past the logits (NaN on the GPU).
  expect_all(message_of([&] {
               check_outputs_fit(classes, at::zeros({1, 7}), ids, "mine", "csv x.csv");
             }),
             {"model.name", "model 'mine' scores 7 classes", "[1, 7]", "has 10 classes", "0..9",
              "csv x.csv", "data.num_classes"});
  expect_all(message_of([&] {
               check_outputs_fit(classes, at::zeros({1, 2, 10}), ids, "mine", "d");
             }),
             {"model.name", "outputs of shape [1, 2, 10] for targets of shape [1]"});
  // A sequence model: (N, T) token targets, (N, T, V) logits.
  dtrain::DataSpec tokens;
  tokens.num_classes = 256;
  const at::Tensor seq = at::zeros({1, 8}, at::kLong);
  EXPECT_NO_THROW(check_outputs_fit(tokens, at::zeros({1, 8, 256}), seq, "gpt", "d"));
  expect_all(message_of([&] {
               check_outputs_fit(tokens, at::zeros({1, 8, 100}), seq, "gpt", "d");
             }),
             {"scores 100 classes", "has 256 classes"});
  // Regression: the widths must be equal (mse would broadcast).
  dtrain::DataSpec regression;
  regression.target_dim = 3;
  EXPECT_NO_THROW(check_outputs_fit(regression, at::zeros({1, 3}), at::zeros({1, 3}), "m", "d"));
  expect_all(message_of([&] {
               check_outputs_fit(regression, at::zeros({1, 1}), at::zeros({1, 3}), "m", "d");
             }),
             {"model.name", "outputs of shape [1, 1] for targets of shape [1, 3]",
              "3 regression target(s)", "broadcast"});
  regression.target_dim = 1;
  EXPECT_NO_THROW(check_outputs_fit(regression, at::zeros({1, 1}), at::zeros({1}), "m", "d"));
}

// A config resolved for one rank with `epochs` and `max_steps`; 512 samples in batches of 64
// make 8 steps per epoch.
dtrain::Config run_of(int64_t epochs, int64_t max_steps) {
  dtrain::Config c;
  c.train.global_batch = 64;
  c.train.epochs = epochs;
  c.train.max_steps = max_steps;
  c.resolve(1);
  return c;
}

TEST(RunLimits, StepCountPastInt64NamesTrainEpochs) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t too_many = kMax / 8 + 1;  // x 8 steps per epoch overflows
  expect_all(message_of([&] { dtrain::detail::plan_steps(run_of(too_many, 0), 512, 1, 0); }),
             {"train.epochs", "overflows the step count"});
  // Samples: steps x 64 must fit as well.
  const int64_t epochs = kMax / 64 / 8 + 1;
  expect_all(message_of([&] { dtrain::detail::plan_steps(run_of(epochs, 0), 512, 1, 0); }),
             {"train.epochs", "overflows the sample count"});
  expect_all(
      message_of([&] { dtrain::detail::plan_steps(run_of(too_many, kMax / 64 + 1), 512, 1, 0); }),
      {"train.max_steps", "overflows the sample count"});
  // max_steps bounds a huge epoch count: nothing overflows.
  auto plan = dtrain::detail::plan_steps(run_of(too_many, 10), 512, 1, 0);
  EXPECT_EQ(plan.total_steps, 10);
  EXPECT_EQ(plan.batches.size(), 10u);
}

TEST(RunLimits, StepPlanLargerThanMemoryNamesTrainEpochs) {
  // The plan holds steps x 64 int64 indices: ask for twice the machine's memory.
  const int64_t mem = dtrain::detail::host_memory_bytes();
  ASSERT_GT(mem, 0);
  const int64_t epochs = 2 * mem / (8 * 64 * 8) + 1;
  expect_all(message_of([&] { dtrain::detail::plan_steps(run_of(epochs, 0), 512, 1, 0); }),
             {"train.epochs", "step plan", "more than this machine's"});
}

TEST(RunLimits, SyntheticDataLargerThanMemoryNamesTheSizeKeys) {
  const int64_t mem = dtrain::detail::host_memory_bytes();
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kSynthetic;
  cfg.synthetic_features = 10;
  cfg.synthetic_test_size = 0;
  cfg.synthetic_size = mem / (10 * 4) * 2;  // 10 floats a sample: twice the memory, at least
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.synthetic_size", "data.synthetic_features", "of host memory",
              "more than this machine's", "lower data.synthetic_size"});
  cfg.synthetic_size = 100000000000;  // 1e11 x 10 features: no overflow in the arithmetic either
  cfg.synthetic_features = 1000000000;
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }), {"data.synthetic_size", "e+"});
  // Images: the shape sets the size.
  cfg.synthetic_task = dtrain::test::task_of("images");
  cfg.synthetic_size = 1000;
  cfg.synthetic_shape = {3, 100000, 100000};
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.synthetic_shape", "more than"});
}

TEST(RunLimits, HostOutOfMemoryBecomesAnErrorNamingTheKeys) {
  using dtrain::detail::guard_host_memory;
  expect_all(
      message_of([] {
        guard_host_memory([] { throw std::bad_alloc(); }, "building the model mlp", "model.hidden",
                          "make the model smaller");
      }),
      {"model.hidden", "building the model mlp ran out of host memory", "make the model smaller"});
  // LibTorch's CPU allocator: 2^50 bytes is past any x86-64 address space; the bytes asked for
  // are in the message (1125899906842624 = 1.13e+15).
  expect_all(message_of([] {
               guard_host_memory([] { at::empty({int64_t{1} << 50}, at::kByte); },
                                 "building the datasets", "data.synthetic_size",
                                 "use smaller data");
             }),
             {"data.synthetic_size", "ran out of host memory asking for 1.13e+15 bytes",
              "use smaller data"});
  // Other errors pass through as they are.
  EXPECT_THROW(guard_host_memory([] { throw std::runtime_error("x"); }, "", "", ""),
               std::runtime_error);
}

}  // namespace
