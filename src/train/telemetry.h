// StepTelemetry: what the loop adds to its records beyond the loss, for the hooks that show where
// the time goes (progress, metrics, TensorBoard, the report, the timeline): wall-clock times,
// the window's phase times, the loss scale and gradient norm, GPU memory and NVML figures, and
// at the end every rank's phase times. Reads that wait for the GPU happen only on steps where
// the loop reads the loss anyway (fill_window).
#pragma once

#include <memory>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/records.h"
#include "telemetry/gpu_monitor.h"
#include "train/step_context.h"
#include "util/clock.h"

namespace dtrain::detail {

// Fills RunInfo's throughput facts: tokens per sample, training FLOPs per sample, the device's
// name and its dense peak FLOP/s at the run's precision.
void describe_throughput(RunInfo& info, const Model& model, const Config& cfg);

class StepTelemetry {
 public:
  // Starts the clocks (and the GPU sampler on a CUDA rank) as training is about to begin.
  StepTelemetry(const StepContext& ctx, const Config& cfg);

  // Throughput and training time: a step of `samples` global samples done; an epoch's training
  // begins and ends (the evaluation and saves after it are not training time); training pauses
  // and goes on inside an epoch (an evaluation there; the rate's window restarts after it); the
  // rate's window restarts (at the loop's start and after each epoch's end).
  void step_done(int64_t samples);
  void epoch_begins();
  void epoch_ends();
  void pause() { epoch_ends(); }
  void go_on();
  double epoch_seconds() const { return seconds_since(epoch_start_); }
  void restart_rate();

  // Steps of this process before the steady rate may start: the eager warm-up of a CUDA graph,
  // its capture and one replay (TrainSummary::steady_samples_per_s).
  static constexpr int64_t kSteadyAfterSteps = 5;

  // Every step: wall time, elapsed seconds, this step's buckets.
  void fill_step(StepRecord& rec) const;
  // Steps that read the loss: samples/s over the steps since the last read, the window's phase
  // times, loss scale, gradient norm, memory, GPU; the rate's window restarts.
  void fill_window(StepRecord& rec);
  // At the end: training seconds, this process's samples and its steady rate, wall times,
  // memory, the run's GPU means, every rank's phase times (a collective on `control`: every
  // rank calls it).
  void fill_summary(TrainSummary& summary, Communicator& control) const;

 private:
  const StepContext& ctx_;
  int64_t rate_steps_ = 0, rate_samples_ = 0;
  int64_t steps_ = 0, samples_ = 0;  // this process's
  Clock::time_point rate_start_, epoch_start_, training_since_;
  bool in_epoch_ = false;     // training, not paused
  double train_seconds_ = 0;  // until training_since_
  // Where the steady rate starts: this process's steps, samples and training seconds then.
  struct Mark {
    int64_t step = -1, steps = 0, samples = 0;
    double seconds = 0;
  };
  Mark steady_;
  Clock::time_point start_;
  double wall_start_ = 0;
  PhaseTimes window_start_;
  std::unique_ptr<GpuMonitor> gpu_;
  bool gpu_steady_ = false;  // start_steady called
};

}  // namespace dtrain::detail
