// Device memory facts for the CUDA caching allocator. CPU devices, and CPU builds
// (src/cuda/stub/), answer with zeros and do nothing.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace dtrain::detail {

struct MemoryStats {
  int64_t allocated = 0;  // bytes held by tensors now
  int64_t peak = 0;       // peak of `allocated` since the last reset
  int64_t reserved = 0;   // bytes the caching allocator holds
  int64_t total = 0;      // device memory (0 on CPU)
};

MemoryStats memory_stats(const at::Device& device);
void reset_peak_memory(const at::Device& device);
// Return cached blocks to the driver (after an out-of-memory error, before a CUDA-graph capture,
// between `dtrain bench` settings).
void empty_cache(const at::Device& device);
// Cap the caching allocator at `fraction` of the device's memory (to act like a smaller card).
void set_memory_fraction(const at::Device& device, double fraction);

}  // namespace dtrain::detail
