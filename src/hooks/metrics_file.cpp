// The run's files on rank 0, when it has a run directory: config.yaml (the resolved config,
// written atomically; it loads again as a config) and metrics.jsonl, one JSON object per line:
// {"type": "train", step, epoch, loss, lr, samples_per_s, micro_batch, phase seconds} at every
// progress line and {"type": "eval", step, epoch, test_loss, test_accuracy, test_count} after
// every evaluation; a resumed run appends {"type": "resume", step, checkpoint, world} and goes on.
// A failed write, fsync or close is an Error naming the file and the OS reason; the file is
// closed (and its close checked) at the end of the run.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "hooks/standard.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

class MetricsFile : public Hook {
 public:
  std::string name() const override { return "metrics"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    if (run.rank != 0 || run.run_dir.empty()) return;
    make_dirs(run.run_dir);
    write_file_atomic(run.run_dir + "/config.yaml", run.config->dump());
    // A resumed run appends after a record saying so (the run directory rules:
    // train/run_directory.h); records past the checkpoint's step come again, the same values.
    out_ = std::make_unique<OutputFile>(run.run_dir + "/metrics.jsonl", !run.resumed_from.empty());
    if (!run.resumed_from.empty())
      write({{"type", "resume"}, {"step", run.resumed_step}, {"checkpoint", run.resumed_from},
             {"world", run.world}});
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!out_ || !r.loss) return;
    write({{"type", "train"}, {"step", r.step}, {"epoch", r.epoch}, {"loss", *r.loss},
           {"lr", r.lr}, {"samples_per_s", r.samples_per_s}, {"micro_batch", r.micro_batch},
           {"data_s", r.phases.data}, {"compute_s", r.phases.compute},
           {"comm_s", r.phases.comm}, {"optimizer_s", r.phases.optimizer}});
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    if (!out_) return;
    write({{"type", "eval"}, {"step", r.step}, {"epoch", r.epoch},
           {"test_loss", r.result.loss}, {"test_accuracy", r.result.accuracy},
           {"test_count", r.result.count}});
  }

  void on_end(TrainSummary&) override {
    if (out_) out_->close();
  }

 private:
  void write(const nlohmann::json& record) { out_->write(record.dump() + "\n"); }

  std::unique_ptr<OutputFile> out_;
};

}  // namespace

std::shared_ptr<Hook> make_metrics_file() { return std::make_shared<MetricsFile>(); }

}  // namespace dtrain::detail
