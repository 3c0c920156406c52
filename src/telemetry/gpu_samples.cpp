#include "telemetry/gpu_samples.h"

namespace dtrain::detail {

void GpuSampleSums::add(const NvmlReading& r) {
  if (!r.ok) return;
  for (Sums* s : {&window_, &run_, &steady_}) {
    ++s->n;
    s->utilization += r.utilization;
    s->power_w += r.power_w;
  }
  last_ = r;
}

GpuStats GpuSampleSums::stats(const Sums& s) const {
  GpuStats g;
  g.index = index_;
  g.samples = s.n;
  if (s.n > 0) {
    g.utilization = s.utilization / s.n;
    g.power_w = s.power_w / s.n;
  } else {
    g.utilization = last_->utilization;
    g.power_w = last_->power_w;
  }
  g.memory_used = last_->memory_used;
  g.memory_total = last_->memory_total;
  g.sm_clock_mhz = last_->sm_clock_mhz;
  g.memory_clock_mhz = last_->memory_clock_mhz;
  return g;
}

std::optional<GpuStats> GpuSampleSums::take_window() {
  if (!last_) return std::nullopt;
  const GpuStats g = stats(window_);
  window_ = Sums{};
  return g;
}

std::optional<GpuStats> GpuSampleSums::run_mean() const {
  if (!last_) return std::nullopt;
  const bool steady = steady_started_ && steady_.n > 0;
  std::optional<GpuStats> out = stats(steady ? steady_ : run_);
  if (out) out->steady = steady;
  return out;
}

void GpuSampleSums::start_steady() {
  steady_ = Sums{};
  steady_started_ = true;
}

}  // namespace dtrain::detail
