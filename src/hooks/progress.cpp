// Progress on rank 0: the plan at the start, the training progress, and one line after each
// evaluation. The progress (run.progress) shows epoch, step/total, loss, lr, samples/s, tokens/s
// (sequence models), MFU and GPU utilization when known, elapsed time and the ETA:
//   live   one line on the terminal, redrawn in place ("\r", clear to the end of the line) at
//          every loss read and, between reads, at most every 0.2 s from what the host knows
//          (step, elapsed, ETA: no GPU sync); any log line, an evaluation and the end of the
//          run first end it with a newline (util/live_line.h);
//   lines  a line with an ISO-8601 timestamp at every loss read (files, Slurm logs);
//   auto   live when stdout and stderr are the same terminal (so that a warning can end the
//          line first), else lines; under mpirun stdout is a pseudo-terminal but stderr a pipe;
//   off    no progress (the plan and the evaluations still print).
// run.quiet hides all of it; other ranks print nothing.
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "dtrain/config.h"
#include "dtrain/log.h"
#include "hooks/figures.h"
#include "hooks/standard.h"
#include "util/format.h"
#include "util/live_line.h"

namespace dtrain::detail {
namespace {

constexpr double kRedrawS = 0.2;     // the live line's redraws between loss reads
constexpr double kRateWindowS = 30;  // the ETA's rate: steps over about the last 30 s,
constexpr double kSampleS = 0.1;     // from a (time, step) pair every 0.1 s

// stdout is a terminal and stderr is that same terminal.
bool one_terminal() {
  struct stat out {
  }, err{};
  if (!::isatty(STDOUT_FILENO) || !::isatty(STDERR_FILENO)) return false;
  if (::fstat(STDOUT_FILENO, &out) != 0 || ::fstat(STDERR_FILENO, &err) != 0) return false;
  return out.st_rdev == err.st_rdev;
}

// Local time, ISO 8601 with the UTC offset: 2024-05-01T14:03:07+02:00.
std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", &tm) == 0) return "?";
  std::string s = buf;  // ...+0200: the offset's colon, as ISO 8601's extended format has it
  if (s.size() >= 5) s.insert(s.size() - 2, ":");
  return s;
}

// 45s, 3m05s, 2h07m.
std::string duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return format("%lldm%02llds", s / 60, s % 60);
  return format("%lldh%02lldm", s / 3600, (s % 3600) / 60);
}

class Progress : public Hook {
 public:
  std::string name() const override { return "progress"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    run_ = run;
    classify_ = run.data.num_classes > 0;
    const ProgressMode m = run.config->run.progress;
    mode_ = m == ProgressMode::kAuto ? (one_terminal() ? ProgressMode::kLive : ProgressMode::kLines)
                                     : m;
    shows_ = run.rank == 0 && !run.config->run.quiet && mode_ != ProgressMode::kOff;
    const int64_t rank_batch = run.config->resolved.rank_batch;
    log::detail("training: " + std::to_string(run.world) + " rank(s), global batch " +
                std::to_string(run.config->train.global_batch) + " = " + std::to_string(run.world) +
                " x " + std::to_string(rank_batch / run.micro_batch) + " micro-batches of " +
                std::to_string(run.micro_batch) + "; " + std::to_string(run.steps_per_epoch) +
                " steps/epoch, " + std::to_string(run.total_steps) + " steps in all");
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!shows_) return;
    if (recent_.empty() || r.elapsed - recent_.back().first >= kSampleS)
      recent_.emplace_back(r.elapsed, r.step);
    while (recent_.size() > 2 && r.elapsed - recent_[1].first >= kRateWindowS) recent_.pop_front();
    if (r.loss) {
      loss_ = *r.loss;
      samples_per_s_ = r.samples_per_s;
      gpu_util_ = r.gpu ? std::optional<double>(r.gpu->utilization) : std::nullopt;
    }
    if (mode_ == ProgressMode::kLines) {
      if (r.loss) log::detail(timestamp() + " " + fields(r));
      return;
    }
    if (r.loss || r.step == r.total_steps || r.elapsed - drawn_at_ >= kRedrawS) {
      log::draw_live(fields(r));
      drawn_at_ = r.elapsed;
    }
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    // Inside an epoch (train.eval_every_steps, the end of train.max_steps) the line says the step.
    std::string line = "epoch " + std::to_string(r.epoch) + "/" + std::to_string(r.epochs);
    if (r.steps_per_epoch > 0 && r.step % r.steps_per_epoch != 0)
      line += " step " + std::to_string(r.step) + "/" + std::to_string(r.total_steps);
    line += "  train loss " + format("%.4f", r.train_loss);
    if (r.val) {  // data.val_fraction
      line += "  val loss " + format("%.4f", r.val->loss);
      if (classify_) line += "  val accuracy " + format("%.2f%%", 100.0 * r.val->accuracy);
    }
    if (r.result.count > 0 || !r.val) {  // a validation split alone: no test numbers
      line += "  test loss " + format("%.4f", r.result.loss);
      if (classify_) line += "  test accuracy " + format("%.2f%%", 100.0 * r.result.accuracy);
      if (r.result.top5) line += "  top-5 " + format("%.2f%%", 100.0 * *r.result.top5);
    }
    if (r.other) {  // train.ema_decay: the weight average's and the model's
      line += std::string("  (") + (r.weights == "ema" ? "EMA; model" : "model; EMA") + " loss " +
              format("%.4f", r.other->loss);
      if (classify_) line += " accuracy " + format("%.2f%%", 100.0 * r.other->accuracy);
      line += ")";
    }
    line += "  (" + format("%.1f", r.epoch_seconds) + " s)";
    if (mode_ == ProgressMode::kLines) line = timestamp() + " " + line;
    log::detail(line);  // ends the live line first
    recent_.clear();    // the ETA's rate counts training, not the evaluation
  }

  void on_end(TrainSummary&) override {
    if (shows_ && mode_ == ProgressMode::kLive) log::end_live();
  }

 private:
  // epoch 1/3 step 120/1407  loss 0.5123  lr 0.002  2345 samples/s  ...  elapsed 12s  ETA 2m03s
  std::string fields(const StepRecord& r) const {
    std::string s = "epoch " + std::to_string(r.epoch) + "/" + std::to_string(r.epochs) + " step " +
                    std::to_string(r.step) + "/" + std::to_string(r.total_steps);
    if (loss_) s += "  loss " + format("%.4f", *loss_) + "  lr " + format("%.3g", r.lr);
    if (samples_per_s_ > 0) {
      s += "  " + format("%.0f", samples_per_s_) + " samples/s";
      if (auto t = tokens_per_s(run_, samples_per_s_)) s += "  " + format("%.0f", *t) + " tokens/s";
      if (auto m = mfu(run_, samples_per_s_, run_.flops_per_sample))
        s += "  MFU " + format("%.1f%%", 100 * *m);
    }
    if (gpu_util_) s += "  GPU " + format("%.0f%%", *gpu_util_);
    s += "  elapsed " + duration(r.elapsed);
    const double dt = r.elapsed - recent_.front().first;
    const int64_t ds = r.step - recent_.front().second;
    if (r.step >= r.total_steps) {
      s += "  ETA 0s";
    } else if (dt > 0 && ds > 0) {
      s += "  ETA " +
           duration(static_cast<double>(r.total_steps - r.step) * dt / static_cast<double>(ds));
    } else {
      s += "  ETA --";
    }
    return s;
  }

  RunInfo run_;
  bool classify_ = false, shows_ = false;
  ProgressMode mode_ = ProgressMode::kLines;
  std::optional<double> loss_, gpu_util_;
  double samples_per_s_ = 0;
  double drawn_at_ = -1e9;
  std::deque<std::pair<double, int64_t>> recent_;  // (elapsed, step) of the recent steps
};

}  // namespace

std::shared_ptr<Hook> make_progress() { return std::make_shared<Progress>(); }

}  // namespace dtrain::detail
