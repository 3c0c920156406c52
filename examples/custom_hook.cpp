// User hooks: plug into dtrain's training loop from C++.
//   - EarlyStop stops training once the test accuracy reaches a target (on_eval), or once the
//     training loss falls below one (on_step); every rank stops at the same step.
//   - LossCsv writes every loss the loop reads to run.dir/run.name/loss.csv on rank 0.
//
//   mpirun -np 2 build/examples/example_custom_hook [section.key=value ...]
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/hooks.h"
#include "dtrain/log.h"
#include "dtrain/session.h"

namespace {

class EarlyStop : public dtrain::Hook {
 public:
  EarlyStop(double target_accuracy, double target_loss)
      : target_accuracy_(target_accuracy), target_loss_(target_loss) {}
  std::string name() const override { return "early_stop"; }

  void on_step(const dtrain::StepRecord& r, dtrain::LoopControl& control) override {
    if (r.loss && *r.loss < target_loss_)
      control.request_stop("training loss " + std::to_string(*r.loss) + " < " +
                           std::to_string(target_loss_));
  }
  void on_eval(const dtrain::EvalRecord& r, dtrain::LoopControl& control) override {
    if (r.result.accuracy >= target_accuracy_)
      control.request_stop("test accuracy " + std::to_string(r.result.accuracy) +
                           " >= " + std::to_string(target_accuracy_));
  }

 private:
  double target_accuracy_, target_loss_;
};

class LossCsv : public dtrain::Hook {
 public:
  std::string name() const override { return "loss_csv"; }

  void on_start(const dtrain::RunInfo& run, dtrain::LoopControl&) override {
    if (run.rank != 0 || run.run_dir.empty()) return;  // the metrics hook made the directory
    path_ = run.run_dir + "/loss.csv";
    out_.open(path_, std::ios::trunc);
    if (!out_) throw dtrain::Error("cannot write", path_);
    out_ << "step,epoch,loss,lr\n";
  }
  void on_step(const dtrain::StepRecord& r, dtrain::LoopControl&) override {
    if (!out_.is_open() || !r.loss) return;
    out_ << r.step << "," << r.epoch << "," << *r.loss << "," << r.lr << "\n";
    out_.flush();
    if (!out_) throw dtrain::Error("write failed", path_);
  }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> overrides(argv + 1, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::Session s =
        dtrain::build_session(rt,
                              dtrain::Config::from_string(R"(
run: {name: custom_hook, dir: runs, log_every: 20}
model: {name: mlp, hidden: [32]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 4096,
       synthetic_test_size: 1024, synthetic_features: 8, synthetic_classes: 3, workers: 1}
train: {epochs: 20, global_batch: 64, optimizer: adamw, lr: 0.01}
)",
                                                          "custom_hook example", overrides),
                              "custom_hook example");
    s.trainer->add_hook(
        std::make_shared<EarlyStop>(/*target_accuracy=*/0.95, /*target_loss=*/0.02));
    s.trainer->add_hook(std::make_shared<LossCsv>());
    const dtrain::TrainSummary summary = s.trainer->fit();
    dtrain::log::info("custom hook: " + std::to_string(summary.steps) + " steps" +
                      (summary.stopped ? ", stopped early" : ", ran to the end"));
    return 0;
  });
}
