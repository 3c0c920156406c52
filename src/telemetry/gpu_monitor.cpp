// GpuMonitor: a thread that reads one GPU through NVML every interval and adds the reading to
// the sums (telemetry/gpu_samples.h) under a lock; the training thread only takes the means.
#include "telemetry/gpu_monitor.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>

#include "dtrain/error.h"
#include "dtrain/log.h"
#include "telemetry/gpu_samples.h"
#include "telemetry/nvml.h"

namespace dtrain::detail {
namespace {

// Each distinct message once per process (every monitor of a process meets the same NVML).
void warn_once(const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(msg).second) return;
  }
  log::warn(msg);
}

}  // namespace

struct GpuMonitor::Impl {
  const Nvml* nvml;  // null for a CPU rank
  std::string pci;
  double interval_s;
  std::chrono::nanoseconds interval{0};
  Nvml::Device device = nullptr;
  std::string why;  // inactive: why

  std::mutex mu;
  std::condition_variable wake;
  bool stop = false;
  std::optional<GpuSampleSums> sums;  // set when active
  std::thread thread;

  Impl(const Nvml* n, std::string id, double s) : nvml(n), pci(std::move(id)), interval_s(s) {}

  void start() {
    if (!(interval_s > 0) || !(interval_s <= 3600))
      throw Error("the GPU sampling interval must be more than 0 and at most 3600 seconds, not " +
                      std::to_string(interval_s),
                  "run.gpu_sample_s");
    interval = std::chrono::nanoseconds(static_cast<int64_t>(interval_s * 1e9));
    if (pci.empty()) {
      why = "no GPU (a CPU rank)";
      return;
    }
    if (!nvml->ok()) {
      why = nvml->reason();
      warn_once(why);
      return;
    }
    std::string missing;
    const std::optional<NvmlDeviceInfo> info = nvml->find(pci, &device, &missing);
    if (!info) {
      why = missing + ": no GPU statistics";
      warn_once(why);
      return;
    }
    pci = info->pci_bus_id;
    sums.emplace(info->index);
    sample();  // the first sample now: take_window() has figures from the start
    thread = std::thread([this] { loop(); });
  }

  void sample() {
    const NvmlReading r = nvml->read(device);  // outside the lock: the driver may take a while
    for (const std::string& f : r.failed) {    // "power: Not Supported"
      const size_t colon = f.find(": ");
      warn_once("NVML cannot read the " + f.substr(0, colon) + " of GPU " + pci + " (" +
                f.substr(colon + 2) + "): that figure stays 0");
    }
    std::lock_guard<std::mutex> lock(mu);
    sums->add(r);
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!wake.wait_for(lock, interval, [&] { return stop; })) {
      lock.unlock();
      sample();
      lock.lock();
    }
  }
};

GpuMonitor::GpuMonitor(const std::string& pci_bus_id, double interval_s)
    : impl_(std::make_unique<Impl>(pci_bus_id.empty() ? nullptr : &Nvml::system(), pci_bus_id,
                                   interval_s)) {
  impl_->start();
}

GpuMonitor::GpuMonitor(const std::string& pci_bus_id, double interval_s, const Nvml& nvml)
    : impl_(std::make_unique<Impl>(&nvml, pci_bus_id, interval_s)) {
  impl_->start();
}

GpuMonitor::~GpuMonitor() {
  if (!impl_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

bool GpuMonitor::active() const { return impl_->sums.has_value(); }

const std::string& GpuMonitor::inactive_reason() const { return impl_->why; }

std::optional<GpuStats> GpuMonitor::take_window() {
  if (!active()) return std::nullopt;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sums->take_window();
}

std::optional<GpuStats> GpuMonitor::run_mean() const {
  if (!active()) return std::nullopt;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sums->run_mean();
}

void GpuMonitor::start_steady() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sums->start_steady();
}

}  // namespace dtrain::detail
