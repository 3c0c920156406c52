// GpuMonitor: one GPU's NVML figures (utilization, memory in use, power, clocks), sampled on a
// thread of its own while training, so the training thread never waits for the driver. NVML is
// opened at run time (libnvidia-ml.so.1): a CPU build needs nothing, and a machine without the
// driver gives no figures and says why once (telemetry/nvml.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "dtrain/records.h"

namespace dtrain::detail {

class Nvml;

class GpuMonitor {
 public:
  // Samples the GPU with PCI bus id `pci_bus_id` ("0000:19:00.0", as CUDA names it) every
  // `interval_s` seconds. An empty id (a CPU rank) or no NVML: no figures, no thread (without
  // NVML, or when NVML has no such GPU, a warning says why, once per process).
  GpuMonitor(const std::string& pci_bus_id, double interval_s);
  // The same through `nvml` (Nvml::system() above), which must outlive the monitor.
  GpuMonitor(const std::string& pci_bus_id, double interval_s, const Nvml& nvml);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  bool active() const;
  // Why there are no figures ("" when active).
  const std::string& inactive_reason() const;
  // Means since the previous call (memory and clocks: the last sample); empty when inactive or
  // when no sample was taken yet (the first sample is taken at construction). A window without
  // a new sample repeats the latest sample's figures with samples = 0.
  std::optional<GpuStats> take_window();
  // Means over every sample since start_steady() (since construction before it, or when no
  // sample came after it).
  std::optional<GpuStats> run_mean() const;
  // Called once the run is past its start-up (GpuSampleSums::start_steady).
  void start_steady();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::detail
