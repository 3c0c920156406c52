// A model whose outputs do not fit the data is refused when the Trainer is built, on every rank,
// before any step: too few class scores for the data's classes (today's NaN loss on the GPU), or
// a regression width other than the targets'. A model that fits trains.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "dist_support.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "dtrain/trainer.h"

namespace dtrain {
namespace {

// A linear model with a fixed output width, whatever the data says (as a user's model may be).
class FixedWidth : public Model {
 public:
  FixedWidth(int64_t in, int64_t out)
      : Model("fixed_width"), fc_(register_module("fc", torch::nn::Linear(in, out))) {}
  at::Tensor forward(const at::Tensor& x) override { return fc_->forward(x.flatten(1)); }

 private:
  torch::nn::Linear fc_;
};

std::string trainer_error(const test::RunSetup& s, int64_t width) {
  auto model = std::make_shared<FixedWidth>(s.data.train->spec().input_shape[0], width);
  try {
    Trainer trainer(s.cfg, *s.comm, *s.comm, at::kCPU, model, s.data.train, s.data.test);
    trainer.fit();
  } catch (const Error& e) {
    return e.what();
  }
  return "NO ERROR";
}

const char* kClassification = R"(
run: {dir: "", seed: 1, log_every: 0, threads: 1}
model: {name: linear}
data: {format: synthetic, synthetic_task: classification, synthetic_features: 6, synthetic_classes: 5,
       synthetic_size: 64, synthetic_test_size: 16, workers: 0}
train: {epochs: 1, max_steps: 2, global_batch: 16, optimizer: sgd, lr: 0.1}
)";

TEST(OutputsFit, TooFewClassScoresAreRefusedBeforeTraining) {
  test::RunSetup s = test::setup_run(kClassification, "outputs", {}, MPI_COMM_WORLD);
  const std::string msg = trainer_error(s, 3);
  EXPECT_NE(msg.find("model.name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model 'fixed_width' scores 3 classes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has 5 classes"), std::string::npos) << msg;
  // Exactly the data's classes (and more) train.
  EXPECT_EQ(trainer_error(s, 5), "NO ERROR");
}

TEST(OutputsFit, RegressionWidthMustEqualTheTargets) {
  test::RunSetup s =
      test::setup_run(kClassification, "outputs",
                      {"data.synthetic_task=regression", "train.loss=mse"}, MPI_COMM_WORLD);
  const std::string msg = trainer_error(s, 2);
  EXPECT_NE(msg.find("outputs of shape [1, 2] for targets of shape [1, 1]"), std::string::npos)
      << msg;
  EXPECT_EQ(trainer_error(s, 1), "NO ERROR");
}

}  // namespace
}  // namespace dtrain
