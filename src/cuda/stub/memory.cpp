// CPU build: there is no device allocator to ask or cap.
#include "cuda/memory.h"

namespace dtrain::detail {

MemoryStats memory_stats(const at::Device&) { return {}; }
void reset_peak_memory(const at::Device&) {}
void empty_cache(const at::Device&) {}
void set_memory_fraction(const at::Device&, double) {}

}  // namespace dtrain::detail
