// Progress lines on rank 0: the plan at the start, then "epoch e/E step s/S  loss  lr  samples/s"
// whenever the loop read the loss, and one line after each evaluation. Quiet (run.quiet) hides
// them all.
#include <memory>
#include <string>

#include "dtrain/config.h"
#include "dtrain/log.h"
#include "hooks/standard.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

class Progress : public Hook {
 public:
  std::string name() const override { return "progress"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    classify_ = run.data.num_classes > 0;
    const int64_t rank_batch = run.config->resolved.rank_batch;
    log::detail("training: " + std::to_string(run.world) + " rank(s), global batch " +
                std::to_string(run.config->train.global_batch) + " = " + std::to_string(run.world) +
                " x " + std::to_string(rank_batch / run.micro_batch) + " micro-batches of " +
                std::to_string(run.micro_batch) + "; " + std::to_string(run.steps_per_epoch) +
                " steps/epoch, " + std::to_string(run.total_steps) + " steps in all");
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!r.loss) return;
    log::detail("epoch " + std::to_string(r.epoch) + "/" + std::to_string(r.epochs) + " step " +
                std::to_string(r.step) + "/" + std::to_string(r.total_steps) + "  loss " +
                format("%.4f", *r.loss) + "  lr " + format("%.3g", r.lr) + "  " +
                format("%.0f", r.samples_per_s) + " samples/s");
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    std::string line = "epoch " + std::to_string(r.epoch) + "/" + std::to_string(r.epochs) +
                       "  train loss " + format("%.4f", r.train_loss) + "  test loss " +
                       format("%.4f", r.result.loss);
    if (classify_) line += "  test accuracy " + format("%.2f%%", 100.0 * r.result.accuracy);
    line += "  (" + format("%.1f", r.epoch_seconds) + " s)";
    log::detail(line);
  }

 private:
  bool classify_ = false;
};

}  // namespace

std::shared_ptr<Hook> make_progress() { return std::make_shared<Progress>(); }

}  // namespace dtrain::detail
