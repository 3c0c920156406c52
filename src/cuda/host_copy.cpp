// CUDA build: pinned host buffers and the marks a background thread waits for (cuda/host_copy.h).
#include "cuda/host_copy.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace dtrain::detail {

at::Tensor host_buffer(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device& for_device) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(for_device.is_cuda()));
}

std::shared_ptr<void> mark_current_stream(const at::Device& device) {
  if (!device.is_cuda()) return nullptr;
  c10::cuda::CUDAGuard guard(device.index());
  auto event = std::make_shared<at::cuda::CUDAEvent>();
  event->record(c10::cuda::getCurrentCUDAStream(device.index()));
  return event;
}

void wait_for_mark(const std::shared_ptr<void>& mark) {
  if (mark) static_cast<at::cuda::CUDAEvent*>(mark.get())->synchronize();
}

}  // namespace dtrain::detail
