// For tests/e2e/test_report.sh: a run whose training data takes DELAY_MS milliseconds per batch
// (a Dataset of the public API that sleeps in get()), with enough compute per step that a loader
// without delay keeps up. The report's diagnosis must call the slow run data-bound and name
// data.workers, and must not call the fast one data-bound. CPU ranks on any machine: the step's
// compute must be slow enough for a loader without delay to keep up.
//
//   mpirun -np 2 dtrain_e2e_slow_data DELAY_MS [section.key=value ...]
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/models.h"
#include "dtrain/session.h"
#include "dtrain/trainer.h"

namespace {

class SlowDataset : public dtrain::Dataset {
 public:
  SlowDataset(std::shared_ptr<dtrain::Dataset> inner, int delay_ms)
      : inner_(std::move(inner)), delay_(delay_ms) {}
  int64_t size() const override { return inner_->size(); }
  dtrain::Batch get(const std::vector<int64_t>& indices) const override {
    std::this_thread::sleep_for(delay_);
    return inner_->get(indices);
  }
  dtrain::Batch get_pinned(const std::vector<int64_t>& indices) const override {
    std::this_thread::sleep_for(delay_);
    return inner_->get_pinned(indices);
  }
  dtrain::DataSpec spec() const override { return inner_->spec(); }
  std::string describe() const override {
    return inner_->describe() + ", " + std::to_string(delay_.count()) + " ms per batch";
  }

 private:
  std::shared_ptr<dtrain::Dataset> inner_;
  std::chrono::milliseconds delay_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dtrain_e2e_slow_data DELAY_MS [section.key=value ...]\n");
    return 2;
  }
  const int delay_ms = std::stoi(argv[1]);
  const std::vector<std::string> overrides(argv + 2, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::Config cfg = dtrain::Config::from_string(R"(
run: {name: slow_data, log_every: 5, timeout_s: 300, device: cpu}
model: {name: mlp, hidden: [256]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 8192,
       synthetic_test_size: 0, synthetic_features: 128, synthetic_classes: 4, workers: 1,
       prefetch: 4}
train: {epochs: 1, max_steps: 24, global_batch: 256, optimizer: sgd, lr: 0.05}
)",
                                                     "slow_data", overrides);
    // The config alone, then the datasets and the model by the public API, the training data
    // behind the delay.
    dtrain::Session s =
        dtrain::build_session(rt, std::move(cfg), "slow_data", /*config_only=*/true);
    dtrain::Splits data = dtrain::make_datasets(s.config.data, s.config.run.seed);
    auto model = dtrain::make_model(s.config.model.name, s.config.model, data.train->spec());
    auto slow = std::make_shared<SlowDataset>(data.train, delay_ms);
    dtrain::Trainer trainer(s.config, rt.comm(), rt.cpu_comm(), rt.device(), model, slow,
                            data.test);
    trainer.fit();
    return 0;
  });
}
