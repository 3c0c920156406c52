// CUDA build: the loader's asynchronous host-to-device copies, each on its thread's own stream,
// and the mark of the queued work the data wait is judged by.
#include "cuda/streams.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

namespace dtrain::detail {

namespace {

// The calling thread's side stream on `device` (the caller guards the device).
c10::cuda::CUDAStream thread_stream(const at::Device& device) {
  thread_local std::optional<c10::cuda::CUDAStream> stream;
  if (!stream || stream->device_index() != device.index())
    stream = c10::cuda::getStreamFromPool(false, device.index());
  return *stream;
}

}  // namespace

void* loader_stream(const at::Device& device) {
  c10::cuda::CUDAGuard device_guard(device.index());
  return thread_stream(device).stream();
}

at::Tensor empty_on_loader_stream(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device& device) {
  c10::cuda::CUDAGuard device_guard(device.index());
  c10::cuda::CUDAStreamGuard stream_guard(thread_stream(device));
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(device));
}

at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device& device,
                                std::shared_ptr<void>& ready) {
  c10::cuda::CUDAGuard device_guard(device.index());
  const c10::cuda::CUDAStream stream = thread_stream(device);
  c10::cuda::CUDAStreamGuard stream_guard(stream);
  at::Tensor d = host.to(at::TensorOptions().device(device), /*non_blocking=*/true);
  auto event = std::make_shared<at::cuda::CUDAEvent>();
  event->record(stream);
  ready = event;
  return d;
}

void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t) {
  if (!ready || !t.defined() || !t.is_cuda()) return;
  const auto current = c10::cuda::getCurrentCUDAStream(t.device().index());
  static_cast<at::cuda::CUDAEvent*>(ready.get())->block(current);
  t.record_stream(current);
}

void QueueMark::record(const at::Device& device) {
  if (!device.is_cuda()) return;
  if (!event_) event_ = std::make_shared<at::cuda::CUDAEvent>();
  static_cast<at::cuda::CUDAEvent*>(event_.get())
      ->record(c10::cuda::getCurrentCUDAStream(device.index()));
}

bool QueueMark::pending() const {
  return event_ && !static_cast<at::cuda::CUDAEvent*>(event_.get())->query();
}

}  // namespace dtrain::detail
