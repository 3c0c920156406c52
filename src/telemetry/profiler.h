// StepProfiler: records a window of training steps with LibTorch's Kineto profiler (host
// operators, CUDA runtime calls, GPU kernels and copies) and answers "where did the time go"
// without another tool: a Chrome trace per rank (open in chrome://tracing or Perfetto) and a
// summary of the recorded steps (wall time per step, GPU busy share, kernels, host
// synchronizations, the heaviest kernels).
// Invariants: at most one window per run; each recorded step is one "dtrain_step" range in the
// trace; the profiler is stopped (and the trace written) even when training ends early.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dtrain::detail {

struct ProfileSummary {
  int64_t steps = 0;  // "dtrain_step" ranges found
  // From the first range's start to the last range's end, or to the end of the last GPU work
  // that began inside the ranges when that is later.
  double wall_ms_per_step = 0;
  double gpu_busy = 0;            // share of that wall time with any kernel/copy running
  double kernel_ms_per_step = 0;  // sum of kernel durations
  double kernels_per_step = 0;
  double syncs_per_step = 0;  // cuda*Synchronize calls on the host
  std::string table;          // the report, one line per row
};

// Summarizes a Chrome trace written by the profiler (also usable on traces of other programs
// that mark steps with "dtrain_step" ranges). `top`: heaviest kernels listed.
ProfileSummary summarize_trace(const std::string& path, int top = 10);

// "" when this LibTorch's profiler can write a Chrome trace (it is built with Kineto), else why
// not (probed once per process). The config check (session) refuses run.profile_steps on it.
std::string profiler_trace_problem();

class StepProfiler {
 public:
  // Records steps [start, start + steps) into `path`; cuda: also GPU activity.
  StepProfiler(int64_t start, int64_t steps, std::string path, bool cuda);
  ~StepProfiler();  // stops a window still open (the trace is still written)
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around each training step: begin_step starts the profiler at `start` and opens the step's
  // range; end_step closes it and says whether that was the window's last step (the caller
  // then waits for the device and calls stop()).
  void begin_step(int64_t step);
  bool end_step(int64_t step);
  // Stops if recording and writes the trace; returns whether a trace was written.
  bool stop();
  const std::string& path() const { return path_; }
  bool done() const { return done_; }

 private:
  int64_t start_, steps_;
  std::string path_;
  bool cuda_;
  bool active_ = false, done_ = false;
  struct Scope;
  std::unique_ptr<Scope> scope_;  // the open "dtrain_step" range
};

}  // namespace dtrain::detail
