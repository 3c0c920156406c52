// GpuMonitor without NVML yet: no figures (the NVML sampler replaces this file).
#include "telemetry/gpu_monitor.h"

namespace dtrain::detail {

struct GpuMonitor::Impl {};

GpuMonitor::GpuMonitor(const std::string&, double) : impl_(std::make_unique<Impl>()) {}
GpuMonitor::~GpuMonitor() = default;
bool GpuMonitor::active() const { return false; }
std::optional<GpuStats> GpuMonitor::take_window() { return std::nullopt; }
std::optional<GpuStats> GpuMonitor::run_mean() const { return std::nullopt; }

}  // namespace dtrain::detail
