// A stand-in for the driver's NVML (libnvidia-ml.so.1) with two fixed GPUs, for the tests of
// GpuMonitor and `dtrain env` on machines without a GPU. It exports NVML's C entry points with
// nvml.h's signatures and answers as NVML does: an error before nvmlInit, "Not Supported" for a
// figure a GPU lacks (the second GPU has no power reading). Environment (test knobs):
// FAKE_NVML_INIT_ERROR=N makes nvmlInit_v2 return N; FAKE_NVML_CUDA_DRIVER=V sets the CUDA
// version the "driver" supports (default 12050).
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct FakeDevice {
  const char* name;
  const char* bus_id;  // NVML's spelling: 8-digit domain
  unsigned domain, bus, dev;
  int cc_major, cc_minor;
  unsigned long long total, used;
  unsigned utilization;
  int power_mw;  // < 0: not supported
  unsigned sm_mhz, mem_mhz;
};

FakeDevice g_devices[] = {
    {"Fake GPU H200", "00000000:19:00.0", 0, 0x19, 0, 9, 0, 80ULL << 30, 1ULL << 30, 37, 123456,
     1980, 2619},
    {"Fake GPU A100", "00000000:3B:00.0", 0, 0x3b, 0, 8, 0, 40ULL << 30, 2ULL << 30, 0, -1, 1410,
     1593},
};
constexpr unsigned kCount = 2;
int g_inits = 0;

constexpr int kSuccess = 0, kUninitialized = 1, kInvalid = 2, kNotSupported = 3, kNotFound = 6,
              kInsufficientSize = 7;

struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};

FakeDevice* dev(void* h) { return static_cast<FakeDevice*>(h); }

int copy(const char* s, char* out, unsigned length) {
  if (std::strlen(s) + 1 > length) return kInsufficientSize;
  std::strcpy(out, s);
  return kSuccess;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  if (const char* e = std::getenv("FAKE_NVML_INIT_ERROR")) return std::atoi(e);
  ++g_inits;
  return kSuccess;
}
int nvmlShutdown() {
  if (g_inits == 0) return kUninitialized;
  --g_inits;
  return kSuccess;
}
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalid:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kNotFound:
      return "Not Found";
    case kInsufficientSize:
      return "Insufficient Size";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  return g_inits ? copy("555.42.06", version, length) : kUninitialized;
}
int nvmlSystemGetCudaDriverVersion_v2(int* v) {
  if (!g_inits) return kUninitialized;
  const char* e = std::getenv("FAKE_NVML_CUDA_DRIVER");
  *v = e ? std::atoi(e) : 12050;
  return kSuccess;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  if (!g_inits) return kUninitialized;
  *n = kCount;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
  if (!g_inits) return kUninitialized;
  if (i >= kCount) return kInvalid;
  *h = &g_devices[i];
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** h) {
  if (!g_inits) return kUninitialized;
  unsigned d = 0, b = 0, s = 0, f = 0;
  if (std::sscanf(id, "%x:%x:%x.%x", &d, &b, &s, &f) != 4) {
    d = 0;
    if (std::sscanf(id, "%x:%x.%x", &b, &s, &f) != 3) return kInvalid;
  }
  for (auto& x : g_devices)
    if (x.domain == d && x.bus == b && x.dev == s && f == 0) {
      *h = &x;
      return kSuccess;
    }
  return kNotFound;
}
int nvmlDeviceGetName(void* h, char* name, unsigned length) {
  return g_inits ? copy(dev(h)->name, name, length) : kUninitialized;
}
int nvmlDeviceGetPciInfo_v3(void* h, PciInfo* p) {
  if (!g_inits) return kUninitialized;
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->bus_id, dev(h)->bus_id);
  std::strcpy(p->bus_id_legacy, dev(h)->bus_id + 4);
  p->domain = dev(h)->domain, p->bus = dev(h)->bus, p->device = dev(h)->dev;
  return kSuccess;
}
int nvmlDeviceGetCudaComputeCapability(void* h, int* major, int* minor) {
  if (!g_inits) return kUninitialized;
  *major = dev(h)->cc_major, *minor = dev(h)->cc_minor;
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* h, Utilization* u) {
  if (!g_inits) return kUninitialized;
  u->gpu = dev(h)->utilization, u->memory = dev(h)->utilization / 3;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* h, Memory* m) {
  if (!g_inits) return kUninitialized;
  m->total = dev(h)->total, m->used = dev(h)->used, m->free = m->total - m->used;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* h, unsigned* mw) {
  if (!g_inits) return kUninitialized;
  if (dev(h)->power_mw < 0) return kNotSupported;
  *mw = static_cast<unsigned>(dev(h)->power_mw);
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void* h, int type, unsigned* mhz) {
  if (!g_inits) return kUninitialized;
  if (type == 1)
    *mhz = dev(h)->sm_mhz;
  else if (type == 2)
    *mhz = dev(h)->mem_mhz;
  else
    return kInvalid;
  return kSuccess;
}

}  // extern "C"
