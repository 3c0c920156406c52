// StepTimer: the hook that times one bench setting on this rank. The clock starts after the
// warm-up's last step and stops after the last timed step, both after the device finished its
// queued work (synchronize), so the timed seconds hold the timed steps' GPU work and nothing
// else. The percentiles come from each step's time: on a GPU the interval between the ends of two
// steps' work on the GPU's own clock (detail::StepMarks: the host runs ahead of the device, so
// its own intervals say little there), on a CPU the host's time from one step's on_step to the
// next. The GPU's NVML figures are sampled over the timed steps only, by a monitor of the
// timer's own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/sweep.h"
#include "cuda/streams.h"
#include "dtrain/comm.h"
#include "dtrain/hooks.h"
#include "telemetry/forecast.h"
#include "telemetry/gpu_monitor.h"
#include "util/clock.h"

namespace dtrain::bench {

// What this rank measured in one setting.
struct Timing {
  bool complete = false;    // the last timed step was reached
  int64_t micro_batch = 0;  // in use (RunInfo's: `auto` measured)
  int64_t steps = 0;        // timed steps
  int64_t samples = 0;      // global samples of the timed steps
  double seconds = 0;       // between the synchronized points
  double data_seconds = 0;  // of it, waiting for the loader
  std::vector<double> step_seconds;
  std::optional<GpuStats> gpu;  // means over the timed steps (NVML; empty under 3 samples)
  int64_t peak_memory = 0, memory_total = 0;  // this rank's GPU (0 on CPU)
  int64_t tokens_per_sample = 0;
  double flops_per_sample = 0, peak_flops = 0;
  std::string device_name;
  // For the scaling forecast (bench/scaling.h): the communication phase over the timed steps,
  // the mean bucket timeline of the timed steps (of the warm-up's last step that had one when
  // none did: a CUDA graph's replays have no host side to time), and the bytes of this rank's
  // parameters and gradients.
  double comm_seconds = 0;
  detail::TimelineMean timeline, warmup_timeline;
  int64_t weight_bytes = 0, gradient_bytes = 0;
};

class StepTimer : public Hook {
 public:
  // `gpu_sample_s`: seconds between NVML samples (run.gpu_sample_s).
  StepTimer(int64_t warmup_steps, int64_t steps, double gpu_sample_s);
  ~StepTimer() override;
  std::string name() const override { return "bench timer"; }
  void on_start(const RunInfo& run, LoopControl& control) override;
  void on_step(const StepRecord& record, LoopControl& control) override;
  void on_end(TrainSummary& summary) override;
  const Timing& timing() const { return timing_; }

 private:
  void start(const StepRecord* record);

  int64_t warmup_, steps_;
  double gpu_sample_s_;
  at::Device device_ = at::kCPU;
  Timing timing_;
  detail::Clock::time_point t0_, last_;
  double data0_ = 0, comm0_ = 0;
  int64_t samples0_ = 0;
  std::unique_ptr<detail::GpuMonitor> gpu_;
  detail::StepMarks marks_;  // the timed steps' ends on the GPU's clock
};

// The `p`-quantile (0 < p <= 1) of `values` by the nearest-rank method: the smallest value with
// at least p of them at or below it. 0 for no values.
double percentile(std::vector<double> values, double p);

// This rank's timing combined with every other rank's into `row` (a collective on `control`):
// the slowest rank's seconds, percentiles, data-wait share and memory; the GPU utilization's mean
// over the ranks that have figures. Then the rates: global samples/s and tokens/s, MFU.
void fill_row(const Timing& mine, Communicator& control, Row& row);

}  // namespace dtrain::bench
