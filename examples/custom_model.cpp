// A user model trained by dtrain: register it by name, then run the same loop as the CLI.
//
//   mpirun -np 2 build/examples/example_custom_model [section.key=value ...]
#include <torch/nn/modules/linear.h>

#include <cstdio>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"
#include "dtrain/runtime.h"
#include "dtrain/telemetry/log.h"
#include "dtrain/trainer.h"

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
  dtrain::Runtime rt(&argc, &argv);
  try {
    dtrain::register_model(
        "residual_mlp",
        [](const dtrain::ModelConfig& c, const dtrain::DataSpec& d) -> std::shared_ptr<dtrain::Model> {
          return std::make_shared<ResidualMlp>(d.input_shape.at(0), c.fc, d.num_classes);
        },
        "example: residual MLP (model.fc wide)");
    std::vector<std::string> overrides(argv + 1, argv + argc);
    dtrain::Config cfg = dtrain::Config::from_string(R"(
run: {name: custom_model, dir: "", log_every: 100}
model: {name: residual_mlp, fc: 64}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 8192,
       synthetic_features: 16, synthetic_classes: 4}
train: {epochs: 3, global_batch: 64, optimizer: adamw, lr: 0.003}
)", "custom_model example", overrides);
    cfg.resolve(rt.world());
    dtrain::log::configure(rt.rank(), cfg.run.quiet);
    rt.setup(cfg.run, cfg.dist);
    dtrain::Splits data = dtrain::make_datasets(cfg.data, cfg.run.seed);
    auto model = dtrain::make_model(cfg.model.name, cfg.model, data.train->spec());
    dtrain::Trainer trainer(cfg, rt.comm(), rt.cpu_comm(), rt.device(), model, data.train, data.test);
    dtrain::TrainSummary s = trainer.fit();
    dtrain::log::info("custom model: test accuracy " + std::to_string(100 * s.eval.accuracy) + "%");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rt.rank(), e.what());
    rt.abort(1);
  }
}
