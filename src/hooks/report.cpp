// The end-of-run report on rank 0: steps, samples and rate; where rank 0's time went (data wait,
// compute, communication not hidden behind backward, optimizer); peak GPU memory; recoveries
// and skipped steps; an early stop; the final evaluation; the run directory.
#include <memory>
#include <string>

#include "cuda/memory.h"
#include "dtrain/log.h"
#include "hooks/standard.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

class Report : public Hook {
 public:
  std::string name() const override { return "report"; }

  void on_start(const RunInfo& run, LoopControl&) override { run_ = run; }

  void on_end(TrainSummary& s) override {
    const PhaseTimes& p = s.phases;
    const double total = std::max(1e-9, p.total());
    log::info(format("done: %lld steps, %lld samples in %.1f s (%.0f samples/s); rank 0 time: "
                     "data %.1f%%, compute %.1f%%, communication %.1f%%, optimizer %.1f%%",
                     static_cast<long long>(s.steps), static_cast<long long>(s.samples), s.seconds,
                     s.seconds > 0 ? s.samples / s.seconds : 0.0, 100 * p.data / total,
                     100 * p.compute / total, 100 * p.comm / total, 100 * p.optimizer / total));
    if (run_.device.is_cuda())
      log::info("peak GPU memory " + gib(memory_stats(run_.device).peak) +
                " (allocated by tensors) on rank 0");
    if (s.oom_retries > 0)
      log::info("out-of-memory recoveries: " + std::to_string(s.oom_retries) +
                "; micro-batch now " + std::to_string(s.micro_batch));
    if (s.skipped_steps > 0)
      log::info("fp16 steps skipped for non-finite gradients: " + std::to_string(s.skipped_steps));
    if (s.stopped)
      log::info("stopped after step " + std::to_string(s.steps) + " of " +
                std::to_string(run_.total_steps) + ": a hook on rank " +
                std::to_string(s.stopped_by) + " asked to stop");
    if (s.eval.count > 0) {
      if (run_.data.num_classes > 0)
        log::info(format("final test accuracy: %.2f%% (loss %.4f, %lld samples)",
                         100.0 * s.eval.accuracy, s.eval.loss, static_cast<long long>(s.eval.count)));
      else
        log::info(format("final test loss: %.6f (%lld samples)", s.eval.loss,
                         static_cast<long long>(s.eval.count)));
    }
    if (!run_.run_dir.empty()) log::detail("run directory: " + run_.run_dir);
  }

 private:
  RunInfo run_;
};

}  // namespace

std::shared_ptr<Hook> make_report() { return std::make_shared<Report>(); }

}  // namespace dtrain::detail
