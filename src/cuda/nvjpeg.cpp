// CUDA build: nvJPEG through dlopen (Note [nvJPEG at run time]) and the counted allocations of
// the GPU decoders (decode_memory()).
#include "cuda/nvjpeg.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/jpeg_batch.h"

namespace dtrain::detail {
namespace nvjpeg {
namespace {

struct Loaded {
  Api api{};
  bool ok = false;
  std::string text;
};

template <class F>
bool bind(void* lib, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  if (f == nullptr && missing.empty()) missing = name;
  return f != nullptr;
}

// Where libnvjpeg may be: the loader's path, then beside the CUDA runtime dtrain runs with (a
// CUDA toolkit's lib64, or the pip wheels' nvidia/cu13/lib), then the wheels' older layout
// (nvidia/cuda_runtime/lib beside nvidia/nvjpeg/lib).
std::vector<std::string> candidates(int major) {
  const std::string name = "libnvjpeg.so." + std::to_string(major);
  std::vector<std::string> c = {name, "libnvjpeg.so"};
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
    if (!dir.empty()) {
      c.push_back(dir + "/" + name);
      c.push_back(dir + "/../../nvjpeg/lib/" + name);
    }
  }
  return c;
}

Loaded load() {
  Loaded l;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  const std::vector<std::string> paths = candidates(runtime / 1000);
  void* lib = nullptr;
  std::string first_error;
  for (const std::string& p : paths) {
    lib = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* e = ::dlerror();
    if (first_error.empty()) first_error = e != nullptr ? e : p + ": not found";
  }
  if (lib == nullptr) {
    l.text = "nvJPEG is not installed (" + first_error + ")";
    return l;
  }
  Api& a = l.api;
  std::string missing;
  bind(lib, "nvjpegGetProperty", a.get_property, missing);
  bind(lib, "nvjpegCreateEx", a.create_ex, missing);
  bind(lib, "nvjpegDestroy", a.destroy, missing);
  bind(lib, "nvjpegJpegStateCreate", a.state_create, missing);
  bind(lib, "nvjpegJpegStateDestroy", a.state_destroy, missing);
  bind(lib, "nvjpegDecodeBatchedInitialize", a.batched_initialize, missing);
  bind(lib, "nvjpegDecodeBatched", a.batched, missing);
  bind(lib, "nvjpegJpegStreamCreate", a.stream_create, missing);
  bind(lib, "nvjpegJpegStreamDestroy", a.stream_destroy, missing);
  bind(lib, "nvjpegJpegStreamParse", a.stream_parse, missing);
  bind(lib, "nvjpegDecodeBatchedSupported", a.batched_supported, missing);
  std::string optional;  // a faster parse for the hardware decoder's check, its memory pool
  bind(lib, "nvjpegJpegStreamParseHeader", a.stream_parse_header, optional);
  bind(lib, "nvjpegDecodeBatchedPreAllocate", a.batched_pre_allocate, optional);
  std::string no_roi;  // the region decode: all four, or none
  bind(lib, "nvjpegDecodeParamsCreate", a.params_create, no_roi);
  bind(lib, "nvjpegDecodeParamsDestroy", a.params_destroy, no_roi);
  bind(lib, "nvjpegDecodeParamsSetROI", a.params_set_roi, no_roi);
  bind(lib, "nvjpegDecodeBatchedEx", a.batched_ex, no_roi);
  if (!no_roi.empty())
    a.params_create = nullptr, a.params_destroy = nullptr, a.params_set_roi = nullptr,
    a.batched_ex = nullptr;
  if (!missing.empty()) {
    l.text = "the nvJPEG found lacks " + missing;
    return l;  // the library stays open: harmless, and never opened twice
  }
  int major = 0, minor = 0, patch = 0;
  a.get_property(kMajorVersion, &major);
  a.get_property(kMinorVersion, &minor);
  a.get_property(kPatchLevel, &patch);
  l.ok = true;
  l.text =
      "nvJPEG " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

std::atomic<int64_t> g_device{0}, g_pinned{0}, g_device_calls{0}, g_pinned_calls{0};
std::mutex g_mu;
std::unordered_map<void*, size_t>& sizes() {
  static auto* m = new std::unordered_map<void*, size_t>();  // outlives every decoder
  return *m;
}

void remember(void* p, size_t n, std::atomic<int64_t>& total) {
  std::lock_guard<std::mutex> lock(g_mu);
  sizes()[p] = n;
  total += static_cast<int64_t>(n);
}
void forget(void* p, std::atomic<int64_t>& total) {
  std::lock_guard<std::mutex> lock(g_mu);
  const auto it = sizes().find(p);
  if (it == sizes().end()) return;
  total -= static_cast<int64_t>(it->second);
  sizes().erase(it);
}

int dev_malloc(void** p, size_t n) {
  const cudaError_t rc = cudaMalloc(p, n);
  ++g_device_calls;
  if (rc == cudaSuccess) remember(*p, n, g_device);
  return static_cast<int>(rc);
}
int dev_free(void* p) {
  forget(p, g_device);
  return static_cast<int>(cudaFree(p));
}
int host_malloc(void** p, size_t n, unsigned int flags) {
  const cudaError_t rc = cudaHostAlloc(p, n, flags);
  ++g_pinned_calls;
  if (rc == cudaSuccess) remember(*p, n, g_pinned);
  return static_cast<int>(rc);
}
int host_free(void* p) {
  forget(p, g_pinned);
  return static_cast<int>(cudaFreeHost(p));
}

}  // namespace

const Api* api() { return loaded().ok ? &loaded().api : nullptr; }
const std::string& api_text() { return loaded().text; }

DevAllocator* counted_device_allocator() {
  static DevAllocator a{&dev_malloc, &dev_free};
  return &a;
}
PinnedAllocator* counted_pinned_allocator() {
  static PinnedAllocator a{&host_malloc, &host_free};
  return &a;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  return dev_malloc(&p, bytes) == 0 ? p : nullptr;
}
void device_free(void* p) {
  if (p != nullptr) dev_free(p);
}
void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  return host_malloc(&p, bytes, cudaHostAllocDefault) == 0 ? p : nullptr;
}
void pinned_free(void* p) {
  if (p != nullptr) host_free(p);
}

std::string status_name(Status s) {
  static const char* const names[] = {"success",
                                      "not initialized",
                                      "invalid parameter",
                                      "bad JPEG",
                                      "JPEG not supported",
                                      "allocator failure",
                                      "execution failed",
                                      "architecture mismatch",
                                      "internal error",
                                      "implementation not supported",
                                      "incomplete bitstream"};
  if (s >= 0 && s < static_cast<Status>(sizeof names / sizeof names[0]))
    return std::string(names[s]) + " (" + std::to_string(s) + ")";
  return "status " + std::to_string(s);
}

}  // namespace nvjpeg

NvjpegStatus nvjpeg_status() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return {false, "no CUDA device is visible"};
  return {nvjpeg::api() != nullptr, nvjpeg::api_text()};
}

DecodeMemory decode_memory() {
  return {nvjpeg::g_device.load(), nvjpeg::g_pinned.load(), nvjpeg::g_device_calls.load(),
          nvjpeg::g_pinned_calls.load()};
}

}  // namespace dtrain::detail
