// A dataset of your own: implement dtrain::Dataset (size, get, spec, describe) and hand it to a
// Trainer. Here the samples are points on interleaved spirals, computed from their index; a
// dataset that reads files does the same in get(). The session still sets up logging, the
// device and the communicators (build_session with config_only); the data, the model and the
// Trainer are built here.
//
//   mpirun -np 2 build-examples/example_custom_dataset [section.key=value ...]
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/session.h"
#include "dtrain/trainer.h"

namespace {

// Points (N, 2) on `arms` spirals of one and a half turns; the class is the spiral. Sample i is
// a function of i alone (no state, no random generator), so every rank and every loader thread
// reads the same data, as Dataset requires; `salt` makes another split with other points.
class Spirals : public dtrain::Dataset {
 public:
  Spirals(int64_t size, int64_t arms, uint64_t salt) : size_(size), arms_(arms), salt_(salt) {}

  int64_t size() const override { return size_; }

  dtrain::Batch get(const std::vector<int64_t>& indices) const override {
    const int64_t n = static_cast<int64_t>(indices.size());
    at::Tensor x = at::empty({n, 2}, at::kFloat);  // (N, 2)
    at::Tensor y = at::empty({n}, at::kLong);      // (N,)
    auto xs = x.accessor<float, 2>();
    auto ys = y.accessor<int64_t, 1>();
    const double per_arm = static_cast<double>(size_ / arms_);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = indices[k];
      if (i < 0 || i >= size_)
        throw dtrain::Error("sample " + std::to_string(i) + " of " + std::to_string(size_),
                            describe());
      const int64_t arm = i % arms_;
      const double t = (static_cast<double>(i / arms_) + 0.5) / per_arm;  // 0..1 along the arm
      const double angle = 2 * M_PI * (static_cast<double>(arm) / arms_ + 1.5 * t);
      const double r = t + 0.03 * jitter(i);
      xs[k][0] = static_cast<float>(r * std::cos(angle));
      xs[k][1] = static_cast<float>(r * std::sin(angle));
      ys[k] = arm;
    }
    return {x, y};
  }

  dtrain::DataSpec spec() const override {
    dtrain::DataSpec s;
    s.input_shape = {2};
    s.num_classes = arms_;
    return s;
  }
  std::string describe() const override {
    return "spirals (" + std::to_string(size_) + " points, " + std::to_string(arms_) + " arms)";
  }

 private:
  // A number in [-1, 1) from the index (splitmix64's mix).
  double jitter(int64_t i) const {
    uint64_t z = static_cast<uint64_t>(i) + salt_ * 0x9e3779b97f4a7c15ull + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) / 4503599627370496.0 - 1.0;  // 2^52
  }

  int64_t size_, arms_;
  uint64_t salt_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> overrides(argv + 1, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::Session s =
        dtrain::build_session(rt,
                              dtrain::Config::from_string(R"(
run: {name: custom_dataset, dir: "", log_every: 0}
model: {name: mlp, hidden: [64, 64]}
train: {epochs: 30, global_batch: 100, optimizer: adamw, lr: 0.01}
)",
                                                          "custom_dataset example", overrides),
                              "custom_dataset example", /*config_only=*/true);
    const dtrain::Config& cfg = s.config;
    at::manual_seed(static_cast<uint64_t>(cfg.run.seed));  // the model's initialization
    auto train = std::make_shared<Spirals>(3000, 3, /*salt=*/0);
    auto test = std::make_shared<Spirals>(900, 3, /*salt=*/1);
    std::shared_ptr<dtrain::Model> model =
        dtrain::make_model(cfg.model.name, cfg.model, train->spec());
    dtrain::Trainer trainer(cfg, rt.comm(), rt.cpu_comm(), rt.device(), model, train, test);
    const dtrain::TrainSummary summary = trainer.fit();
    dtrain::log::info("custom dataset: test accuracy " +
                      std::to_string(100 * summary.eval.accuracy) + "%");
    return 0;
  });
}
