// GpuSampleSums: the arithmetic behind GpuMonitor's figures, apart from its thread and NVML so
// that it is tested without a GPU. Utilization and power are means over the samples of a span;
// memory and clocks are the span's last sample (a level, not a rate). Not thread-safe: the
// monitor holds its lock around every call.
#pragma once

#include <optional>

#include "dtrain/records.h"
#include "telemetry/nvml.h"

namespace dtrain::detail {

class GpuSampleSums {
 public:
  explicit GpuSampleSums(int nvml_index) : index_(nvml_index) {}

  // A reading that read nothing (ok false) is not a sample.
  void add(const NvmlReading& r);
  // The samples since the previous call. A window without a new sample gives the latest sample's
  // figures with samples = 0; empty before the first sample.
  std::optional<GpuStats> take_window();
  // Every sample since start_steady(), where at least one came after it; else every sample so far.
  std::optional<GpuStats> run_mean() const;
  // The run's figures leave out what came before: start-up (cuDNN autotuning, CUDA graph capture,
  // the first allocations) keeps the GPU idle or busy in ways the steady run is not.
  void start_steady();

 private:
  struct Sums {
    int n = 0;
    double utilization = 0, power_w = 0;
  };
  GpuStats stats(const Sums& s) const;

  int index_;
  Sums window_, run_, steady_;
  bool steady_started_ = false;
  std::optional<NvmlReading> last_;
};

}  // namespace dtrain::detail
