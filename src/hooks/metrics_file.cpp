// The run's files on rank 0, when it has a run directory: config.yaml (the resolved config,
// written atomically; it loads again as a config) and metrics.jsonl, one JSON object per line:
// {"type": "train", step, epoch, loss, lr, samples_per_s, micro_batch, phase seconds} at every
// progress line and {"type": "eval", step, epoch, test_loss, test_accuracy, test_count} after
// every evaluation; a resumed run appends {"type": "resume", step, checkpoint, world} and goes on.
// A failed write is an Error naming the file.
#include <fstream>
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
    path_ = run.run_dir + "/metrics.jsonl";
    // A resumed run appends after a record saying so (the run directory rules:
    // train/run_directory.h); records past the checkpoint's step come again, the same values.
    out_.open(path_, run.resumed_from.empty() ? std::ios::trunc : std::ios::app);
    if (!out_) throw Error("cannot write metrics", path_);
    if (!run.resumed_from.empty())
      write({{"type", "resume"}, {"step", run.resumed_step}, {"checkpoint", run.resumed_from},
             {"world", run.world}});
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!out_.is_open() || !r.loss) return;
    write({{"type", "train"}, {"step", r.step}, {"epoch", r.epoch}, {"loss", *r.loss},
           {"lr", r.lr}, {"samples_per_s", r.samples_per_s}, {"micro_batch", r.micro_batch},
           {"data_s", r.phases.data}, {"compute_s", r.phases.compute},
           {"comm_s", r.phases.comm}, {"optimizer_s", r.phases.optimizer}});
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    if (!out_.is_open()) return;
    write({{"type", "eval"}, {"step", r.step}, {"epoch", r.epoch},
           {"test_loss", r.result.loss}, {"test_accuracy", r.result.accuracy},
           {"test_count", r.result.count}});
  }

 private:
  void write(const nlohmann::json& record) {
    out_ << record.dump() << "\n";
    out_.flush();
    if (!out_) throw Error("writing metrics failed (disk full?)", path_);
  }

  std::string path_;
  std::ofstream out_;
};

}  // namespace

std::shared_ptr<Hook> make_metrics_file() { return std::make_shared<MetricsFile>(); }

}  // namespace dtrain::detail
