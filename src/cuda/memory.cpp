// CUDA build: device memory through the caching allocator.
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include "cuda/memory.h"

namespace dtrain::detail {

MemoryStats memory_stats(const at::Device& device) {
  MemoryStats m;
  if (!device.is_cuda()) return m;
  const auto idx = device.index();
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(idx);
  m.allocated = s.allocated_bytes[0].current;
  m.peak = s.allocated_bytes[0].peak;
  m.reserved = s.reserved_bytes[0].current;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) m.total = static_cast<int64_t>(total_b);
  return m;
}

void reset_peak_memory(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

void empty_cache(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

void set_memory_fraction(const at::Device& device, double fraction) {
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
}

}  // namespace dtrain::detail
