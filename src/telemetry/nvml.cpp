// NVML through dlopen: the few types and entry points dtrain uses, declared as nvml.h declares
// them (a CPU build has no nvml.h).
#include "telemetry/nvml.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>

namespace dtrain::detail {
// The structs NVML fills, in a named namespace: Nvml::Functions (a member of a class with
// linkage) takes pointers to them, which a type of an anonymous namespace must not be (gcc's
// -Wsubobject-linkage in the unity build; gcc 13 crashed on it).
namespace nvml_abi {

struct Utilization {  // nvmlUtilization_t
  unsigned gpu, memory;
};
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct PciInfo {  // nvmlPciInfo_t (v3)
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

}  // namespace nvml_abi

namespace {

using nvml_abi::Memory;
using nvml_abi::PciInfo;
using nvml_abi::Utilization;
using Ret = int;  // nvmlReturn_t
constexpr Ret kSuccess = 0;
constexpr int kClockSm = 1, kClockMem = 2;  // nvmlClockType_t
constexpr unsigned kNameSize = 96;          // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kDriverSize = 80;        // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

bool hex_field(const std::string& s, unsigned long max, unsigned long* out) {
  if (s.empty() || s.size() > 8) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  *out = std::stoul(s, nullptr, 16);
  return *out <= max;
}

}  // namespace

struct Nvml::Functions {
  using Device = Nvml::Device;
  Ret (*init)();
  Ret (*shutdown)();
  const char* (*error_string)(Ret);
  Ret (*driver_version)(char*, unsigned);
  Ret (*cuda_driver_version)(int*);
  Ret (*count)(unsigned*);
  Ret (*by_index)(unsigned, Device*);
  Ret (*by_pci)(const char*, Device*);
  Ret (*name)(Device, char*, unsigned);
  Ret (*pci_info)(Device, PciInfo*);
  Ret (*utilization)(Device, Utilization*);
  Ret (*memory)(Device, Memory*);
  Ret (*power)(Device, unsigned*);
  Ret (*clock)(Device, int, unsigned*);
  Ret (*capability)(Device, int*, int*);
};

std::string normalize_pci_bus_id(const std::string& id) {
  // [domain:]bus:device.function
  const size_t dot = id.rfind('.');
  if (dot == std::string::npos) return "";
  const size_t c2 = id.rfind(':', dot);
  if (c2 == std::string::npos) return "";
  const size_t c1 = c2 == 0 ? std::string::npos : id.rfind(':', c2 - 1);
  const std::string domain = c1 == std::string::npos ? "0" : id.substr(0, c1);
  const std::string bus =
      id.substr(c1 == std::string::npos ? 0 : c1 + 1, c2 - (c1 == std::string::npos ? 0 : c1 + 1));
  unsigned long d = 0, b = 0, dev = 0, f = 0;
  if (!hex_field(domain, 0xffffffffUL, &d) || !hex_field(bus, 0xff, &b) ||
      !hex_field(id.substr(c2 + 1, dot - c2 - 1), 0x1f, &dev) ||
      !hex_field(id.substr(dot + 1), 0x7, &f))
    return "";
  char out[32];
  std::snprintf(out, sizeof out, "%04lX:%02lX:%02lX.%lX", d, b, dev, f);
  return out;
}

const Nvml& Nvml::system() {
  static const Nvml nvml({"libnvidia-ml.so.1", "libnvidia-ml.so"});
  return nvml;
}

Nvml::Nvml(const std::vector<std::string>& libraries) {
  void* lib = nullptr;
  std::string first;  // the first library's error: the fallbacks fail the same way, as a rule
  for (const std::string& name : libraries) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* err = dlerror();
    std::string why = err ? err : "cannot be opened";
    if (why.find(name) == std::string::npos) why = name + ": " + why;
    if (first.empty()) first = why;
  }
  if (!lib) {
    reason_ = "NVML not found (" + first + "): no GPU statistics";
    return;
  }
  // The library stays loaded for the process's life: NVML's threads and handlers may outlive us.
  auto f = std::make_unique<Functions>();
  std::string missing;
  auto sym = [&](auto& slot, const char* name, const char* fallback = nullptr) {
    void* p = dlsym(lib, name);
    if (!p && fallback) p = dlsym(lib, fallback);
    if (!p) missing += (missing.empty() ? "" : ", ") + std::string(name);
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(p);
  };
  sym(f->init, "nvmlInit_v2");
  sym(f->shutdown, "nvmlShutdown");
  sym(f->error_string, "nvmlErrorString");
  sym(f->driver_version, "nvmlSystemGetDriverVersion");
  sym(f->cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2",
      "nvmlSystemGetCudaDriverVersion");
  sym(f->count, "nvmlDeviceGetCount_v2");
  sym(f->by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(f->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
  sym(f->name, "nvmlDeviceGetName");
  sym(f->pci_info, "nvmlDeviceGetPciInfo_v3");
  sym(f->utilization, "nvmlDeviceGetUtilizationRates");
  sym(f->memory, "nvmlDeviceGetMemoryInfo");
  sym(f->power, "nvmlDeviceGetPowerUsage");
  sym(f->clock, "nvmlDeviceGetClockInfo");
  sym(f->capability, "nvmlDeviceGetCudaComputeCapability");
  if (!missing.empty()) {
    reason_ = "NVML is too old (" + missing + " missing): no GPU statistics";
    return;
  }
  const Ret rc = f->init();
  if (rc != kSuccess) {
    const char* s = f->error_string(rc);
    reason_ = "NVML could not start (nvmlInit_v2: " + std::string(s ? s : "error") + " [" +
              std::to_string(rc) + "]): no GPU statistics";
    return;
  }
  fn_ = f.release();
}

Nvml::~Nvml() {
  if (!fn_) return;
  fn_->shutdown();
  delete fn_;
}

std::string Nvml::error_text(int code) const {
  const char* s = fn_ ? fn_->error_string(code) : nullptr;
  return s ? s : "error " + std::to_string(code);
}

std::string Nvml::driver_version() const {
  char buf[kDriverSize] = {};
  if (!fn_ || fn_->driver_version(buf, kDriverSize) != kSuccess) return "";
  return std::string(buf, strnlen(buf, kDriverSize));
}

int Nvml::cuda_driver_version() const {
  int v = 0;
  if (!fn_ || fn_->cuda_driver_version(&v) != kSuccess) return 0;
  return v;
}

int Nvml::device_count() const {
  unsigned n = 0;
  if (!fn_ || fn_->count(&n) != kSuccess) return 0;
  return static_cast<int>(n);
}

std::optional<NvmlDeviceInfo> Nvml::describe(int index, Device device) const {
  NvmlDeviceInfo d;
  d.index = index;
  char name[kNameSize] = {};
  if (fn_->name(device, name, kNameSize) == kSuccess) d.name.assign(name, strnlen(name, kNameSize));
  PciInfo pci{};
  if (fn_->pci_info(device, &pci) != kSuccess) return std::nullopt;
  d.pci_bus_id =
      normalize_pci_bus_id(std::string(pci.bus_id, strnlen(pci.bus_id, sizeof pci.bus_id)));
  if (fn_->capability(device, &d.cc_major, &d.cc_minor) != kSuccess) d.cc_major = d.cc_minor = 0;
  return d;
}

std::vector<NvmlDeviceInfo> Nvml::devices() const {
  std::vector<NvmlDeviceInfo> out;
  const int n = device_count();
  for (int i = 0; i < n; ++i) {
    Device h = nullptr;
    if (fn_->by_index(static_cast<unsigned>(i), &h) != kSuccess) continue;  // e.g. no permission
    if (auto d = describe(i, h)) out.push_back(*d);
  }
  return out;
}

std::optional<NvmlDeviceInfo> Nvml::find(const std::string& pci, Device* handle,
                                         std::string* why) const {
  if (!fn_) {
    *why = reason_;
    return std::nullopt;
  }
  const std::string id = normalize_pci_bus_id(pci);
  if (id.empty()) {
    *why = "'" + pci + "' is not a PCI bus id";
    return std::nullopt;
  }
  Device h = nullptr;
  const Ret rc = fn_->by_pci(id.c_str(), &h);
  if (rc != kSuccess) {
    *why = "NVML has no GPU " + id + " (nvmlDeviceGetHandleByPciBusId_v2: " + error_text(rc) + ")";
    return std::nullopt;
  }
  // Its NVML index: the index whose handle is this one.
  int index = -1;
  const int n = device_count();
  for (int i = 0; i < n && index < 0; ++i) {
    Device other = nullptr;
    if (fn_->by_index(static_cast<unsigned>(i), &other) == kSuccess && other == h) index = i;
  }
  auto d = describe(index, h);
  if (!d) {
    *why = "NVML cannot read the PCI facts of GPU " + id;
    return std::nullopt;
  }
  *handle = h;
  return d;
}

NvmlReading Nvml::read(Device device) const {
  NvmlReading r;
  if (!fn_) {
    r.failed.push_back("all: " + reason_);
    return r;
  }
  auto check = [&](const char* what, Ret rc) {
    if (rc == kSuccess) {
      r.ok = true;
      return true;
    }
    r.failed.push_back(std::string(what) + ": " + error_text(rc));
    return false;
  };
  Utilization u{};
  if (check("utilization", fn_->utilization(device, &u))) r.utilization = u.gpu;
  Memory m{};
  if (check("memory", fn_->memory(device, &m))) {
    r.memory_used = static_cast<double>(m.used);
    r.memory_total = static_cast<double>(m.total);
  }
  unsigned mw = 0;
  if (check("power", fn_->power(device, &mw))) r.power_w = mw / 1000.0;
  unsigned mhz = 0;
  if (check("SM clock", fn_->clock(device, kClockSm, &mhz))) r.sm_clock_mhz = mhz;
  if (check("memory clock", fn_->clock(device, kClockMem, &mhz))) r.memory_clock_mhz = mhz;
  return r;
}

}  // namespace dtrain::detail
