// A user model trained by dtrain: register it by name, then run the same session as the CLI.
//
//   mpirun -np 2 build/examples/example_custom_model [section.key=value ...]
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/session.h"

namespace {

// Two-layer network with a residual connection: (N, F) -> (N, classes).
class ResidualMlp : public dtrain::Model {
 public:
  ResidualMlp(int64_t in, int64_t width, int64_t out)
      : inp_(register_module("inp", torch::nn::Linear(in, width))),
        mid_(register_module("mid", torch::nn::Linear(width, width))),
        head_(register_module("head", torch::nn::Linear(width, out))) {}
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor h = at::relu(inp_->forward(x.flatten(1)));
    h = h + at::relu(mid_->forward(h));
    return head_->forward(h);
  }

 private:
  torch::nn::Linear inp_, mid_, head_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> overrides(argv + 1, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::register_model(
        "residual_mlp",
        [](const dtrain::ModelConfig& c,
           const dtrain::DataSpec& d) -> std::shared_ptr<dtrain::Model> {
          return std::make_shared<ResidualMlp>(d.input_shape.at(0), c.fc, d.num_classes);
        },
        "example: residual MLP (model.fc wide)",
        // The model.* keys it reads: a config that sets another one is told it is not used.
        std::vector<std::string>{"model.fc"});
    dtrain::Session s =
        dtrain::build_session(rt,
                              dtrain::Config::from_string(R"(
run: {name: custom_model, dir: "", log_every: 100}
model: {name: residual_mlp, fc: 64}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 8192,
       synthetic_features: 16, synthetic_classes: 4}
train: {epochs: 3, global_batch: 64, optimizer: adamw, lr: 0.003}
)",
                                                          "custom_model example", overrides),
                              "custom_model example");
    const dtrain::TrainSummary summary = s.trainer->fit();
    dtrain::log::info("custom model: test accuracy " + std::to_string(100 * summary.eval.accuracy) +
                      "%");
    return 0;
  });
}
