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

  // Every step: wall time, elapsed seconds, this step's buckets.
  void fill_step(StepRecord& rec) const;
  // Steps that read the loss: the window's phase times, loss scale, gradient norm, memory, GPU.
  void fill_window(StepRecord& rec);
  // At the end: wall times, memory, the run's GPU means, every rank's phase times (a
  // collective on `control`: every rank calls it).
  void fill_summary(TrainSummary& summary, Communicator& control) const;

 private:
  const StepContext& ctx_;
  Clock::time_point start_;
  double wall_start_ = 0;
  PhaseTimes window_start_;
  std::unique_ptr<GpuMonitor> gpu_;
  bool gpu_steady_ = false;  // start_steady called
};

}  // namespace dtrain::detail
