#include <c10/util/Exception.h>

#include <cstring>

#include "dtrain/detail/device_memory.h"

namespace dtrain::detail {

#if !DTRAIN_WITH_CUDA
// CPU build: there is no device allocator to ask or cap.
MemoryStats memory_stats(const at::Device&) { return {}; }
void reset_peak_memory(const at::Device&) {}
void empty_cache(const at::Device&) {}
void set_memory_fraction(const at::Device&, double) {}
#endif

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const InjectedOutOfMemory*>(&e)) return true;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  if (dynamic_cast<const c10::Error*>(&e)) {
    const char* w = e.what();
    return std::strstr(w, "out of memory") || std::strstr(w, "not enough memory");
  }
  return false;
}

}  // namespace dtrain::detail
