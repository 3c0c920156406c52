// TensorBoard event files on rank 0, when run.tensorboard is on and the run has a directory:
// run_dir/tensorboard/events.out.tfevents.<time>.<host> (telemetry/tensorboard.h), one event
// per loss read and one per evaluation, at the step they belong to. Tags:
//   loss, lr, samples_per_s, tokens_per_s (sequence models), mfu and mfu_llmc (when known),
//   phase/data, phase/compute, phase/comm, phase/optimizer (shares of the window's time),
//   loss_scale (fp16, train.skip_nonfinite), grad_norm, memory/allocated_gib,
//   memory/reserved_gib, memory/peak_gib (CUDA), gpu/utilization, gpu/memory_used_gib,
//   gpu/power_w, gpu/sm_clock_mhz, gpu/mem_clock_mhz (NVML), eval/loss, eval/accuracy,
//   eval/top5_accuracy (more than 5 classes).
// `tensorboard --logdir runs/` shows every run; a resumed run adds a file beside the first.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "dtrain/config.h"
#include "hooks/figures.h"
#include "hooks/standard.h"
#include "telemetry/tensorboard.h"
#include "util/clock.h"

namespace dtrain::detail {
namespace {

float gib(double bytes) { return static_cast<float>(bytes / (1024.0 * 1024.0 * 1024.0)); }

class TensorBoard : public Hook {
 public:
  std::string name() const override { return "tensorboard"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    if (run.rank != 0 || run.run_dir.empty()) return;
    run_ = run;
    writer_ = std::make_unique<EventWriter>(run.run_dir + "/tensorboard", unix_now());
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!writer_ || !r.loss) return;
    Scalars v;
    auto add = [&](const char* tag, double x) { v.emplace_back(tag, static_cast<float>(x)); };
    auto add_if = [&](const char* tag, const std::optional<double>& x) {
      if (x) add(tag, *x);
    };
    add("loss", *r.loss);
    add("lr", r.lr);
    add("samples_per_s", r.samples_per_s);
    add_if("tokens_per_s", tokens_per_s(run_, r.samples_per_s));
    add_if("mfu", mfu(run_, r.samples_per_s, run_.flops_per_sample));
    add_if("mfu_llmc", mfu(run_, r.samples_per_s, run_.flops_per_sample_llmc));
    const PhaseTimes share = phase_shares(r.window_phases);
    add("phase/data", share.data);
    add("phase/compute", share.compute);
    add("phase/comm", share.comm);
    add("phase/optimizer", share.optimizer);
    add_if("loss_scale", r.loss_scale);
    add_if("grad_norm", r.grad_norm);
    if (run_.device.is_cuda()) {
      v.emplace_back("memory/allocated_gib", gib(static_cast<double>(r.memory.allocated)));
      v.emplace_back("memory/reserved_gib", gib(static_cast<double>(r.memory.reserved)));
      v.emplace_back("memory/peak_gib", gib(static_cast<double>(r.memory.peak)));
    }
    if (r.gpu) {
      add("gpu/utilization", r.gpu->utilization);
      v.emplace_back("gpu/memory_used_gib", gib(r.gpu->memory_used));
      add("gpu/power_w", r.gpu->power_w);
      add("gpu/sm_clock_mhz", r.gpu->sm_clock_mhz);
      add("gpu/mem_clock_mhz", r.gpu->memory_clock_mhz);
    }
    writer_->add_scalars(r.step, r.wall_time > 0 ? r.wall_time : unix_now(), v);
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    if (!writer_) return;
    Scalars v = {{"eval/loss", static_cast<float>(r.result.loss)}};
    if (run_.data.num_classes > 0)
      v.emplace_back("eval/accuracy", static_cast<float>(r.result.accuracy));
    if (r.result.top5) v.emplace_back("eval/top5_accuracy", static_cast<float>(*r.result.top5));
    writer_->add_scalars(r.step, unix_now(), v);
  }

  void on_end(TrainSummary&) override {
    if (writer_) writer_->close();
  }

 private:
  RunInfo run_;
  std::unique_ptr<EventWriter> writer_;
};

}  // namespace

std::shared_ptr<Hook> make_tensorboard() { return std::make_shared<TensorBoard>(); }

}  // namespace dtrain::detail
