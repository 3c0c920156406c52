// Nvml: NVIDIA's management library (libnvidia-ml, installed with the driver), opened at run time
// with dlopen so that dtrain builds and runs without it: a CPU build, or a machine without the
// driver, gets ok() == false and a reason to log once. It reads what nvidia-smi shows: the
// driver's version, each GPU's name, PCI bus id, compute capability, and, sampled, its
// utilization, memory, power and clocks. NVML numbers every GPU of the machine (whatever
// CUDA_VISIBLE_DEVICES hides from CUDA), in PCI order: match GPUs by PCI bus id, never by index.
// Thread-safe: an Nvml does not change after construction, and NVML's calls are thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtrain::detail {

// "0000:19:00.0" (CUDA's spelling: 4-digit domain, upper-case hex) for any way CUDA and NVML
// write a PCI bus id ("00000000:19:00.0", lower case, "19:00.0" without a domain); "" when `id`
// is none of them.
std::string normalize_pci_bus_id(const std::string& id);

struct NvmlDeviceInfo {
  int index = -1;                  // NVML's index
  std::string name;                // "NVIDIA H200"
  std::string pci_bus_id;          // normalized
  int cc_major = 0, cc_minor = 0;  // CUDA compute capability (0.0: unknown)
};

// One reading of a GPU. A figure NVML could not read stays 0 and is named in `failed` with NVML's
// reason ("power: Not Supported"); `ok` when at least one figure was read.
struct NvmlReading {
  bool ok = false;
  double utilization = 0;  // percent of the last sample period (1/6 s to 1 s) a kernel ran
  double memory_used = 0, memory_total = 0;  // bytes (every process)
  double power_w = 0;
  double sm_clock_mhz = 0, memory_clock_mhz = 0;
  std::vector<std::string> failed;
};

class Nvml {
 public:
  struct Functions;                      // the library's entry points
  using Device = struct nvmlDevice_st*;  // NVML's opaque device handle

  // The driver's library (libnvidia-ml.so.1, else libnvidia-ml.so), opened and initialized on
  // first use, once per process.
  static const Nvml& system();

  // Opens the first of `libraries` (dlopen names or paths) that loads and initializes it. Never
  // throws: ok() says whether it worked, reason() why not.
  explicit Nvml(const std::vector<std::string>& libraries);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return fn_ != nullptr; }
  // Why not ok(), in words for a log line: "NVML not found (libnvidia-ml.so.1: <dlerror of the
  // first library>): no GPU statistics"; "" when ok().
  const std::string& reason() const { return reason_; }

  std::string driver_version() const;  // "550.54.15"; "" when unknown
  int cuda_driver_version() const;     // the newest CUDA the driver supports (12040); 0 unknown
  int device_count() const;
  std::vector<NvmlDeviceInfo> devices() const;
  // The GPU with PCI bus id `pci` (any spelling normalize_pci_bus_id takes), with its handle in
  // `*handle`; empty, with the reason in `*why`, when NVML has none.
  std::optional<NvmlDeviceInfo> find(const std::string& pci, Device* handle,
                                     std::string* why) const;
  NvmlReading read(Device device) const;

 private:
  std::optional<NvmlDeviceInfo> describe(int index, Device device) const;
  std::string error_text(int code) const;

  Functions* fn_ = nullptr;  // null unless loaded and initialized
  std::string reason_;
};

}  // namespace dtrain::detail
