// The profiler window (run.profile_steps, run.profile_start) as a hook: each recorded step is
// one "dtrain_step" range; when the window's last step is done the device is drained, the trace
// written (run directory, trace.rank<R>.json) and summarized; rank 0 prints the summary.
#include <memory>
#include <string>

#include "cuda/graph.h"
#include "dtrain/log.h"
#include "hooks/standard.h"
#include "telemetry/profiler.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

class ProfilerWindow : public Hook {
 public:
  explicit ProfilerWindow(const RunConfig& run)
      : start_(run.profile_start), steps_(run.profile_steps) {}
  std::string name() const override { return "profiler"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    const std::string dir = run.run_dir.empty() ? std::string(".") : run.run_dir;
    make_dirs(dir);
    device_ = run.device;
    rank_ = run.rank;
    profiler_ = std::make_unique<StepProfiler>(
        start_, steps_, dir + "/trace.rank" + std::to_string(rank_) + ".json", device_.is_cuda());
  }
  void on_step_begin(int64_t step) override { profiler_->begin_step(step); }
  void on_step(const StepRecord& record, LoopControl&) override { finish(false, record.step - 1); }
  void on_end(TrainSummary& summary) override {
    if (profiler_) finish(true, summary.steps - 1);
    summary.profile = text_;
  }

 private:
  // Ends the window after its last step (or at the end of training): waits for the device so
  // the trace holds every recorded kernel, writes it, and summarizes it.
  void finish(bool at_end, int64_t step) {
    StepProfiler& prof = *profiler_;
    if (prof.done()) return;
    if (!at_end && !prof.end_step(step)) return;
    synchronize(device_);
    if (!prof.stop()) return;
    try {
      const ProfileSummary ps = summarize_trace(prof.path());
      text_ = "trace " + prof.path() + "\n" + ps.table;
    } catch (const std::exception& e) {
      text_ = "trace " + prof.path() + " (not summarized: " + first_line(e.what()) + ")";
    }
    if (rank_ == 0) log::detail(text_);
  }

  int64_t start_, steps_;
  at::Device device_ = at::kCPU;
  int rank_ = 0;
  std::unique_ptr<StepProfiler> profiler_;
  std::string text_;
};

}  // namespace

std::shared_ptr<Hook> make_profiler_window(const RunConfig& run) {
  return std::make_shared<ProfilerWindow>(run);
}

}  // namespace dtrain::detail
