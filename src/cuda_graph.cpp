// CUDA build: side streams, graph capture and asynchronous loader copies.
#include "dtrain/detail/cuda_graph.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

#include "dtrain/detail/torch_compat.h"
#include "dtrain/error.h"

namespace dtrain::detail {

void synchronize(const at::Device& device) {
  if (!device.is_cuda()) return;
  c10::cuda::CUDAGuard device_guard(device.index());
  c10::cuda::device_synchronize();
}

bool cuda_graphs_available() { return DTRAIN_TORCH_AT_LEAST(2, 0); }

struct SideStreamGuard::Impl {
  explicit Impl(c10::cuda::CUDAStream s) : guard(s) {}
  c10::cuda::CUDAStreamGuard guard;
};

SideStreamGuard::SideStreamGuard(const at::Device& device) {
  if (!device.is_cuda()) return;
  impl_ = std::make_unique<Impl>(c10::cuda::getStreamFromPool(false, device.index()));
}
SideStreamGuard::~SideStreamGuard() = default;

struct StepGraph::Impl {
  at::Device device;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};

StepGraph::StepGraph(const at::Device& device) : impl_(std::make_unique<Impl>(Impl{device, {}})) {}
StepGraph::~StepGraph() = default;

void StepGraph::capture(const std::function<void()>& body) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  c10::cuda::CUDAGuard device_guard(impl_->device.index());
  if (c10::cuda::getCurrentCUDAStream() == c10::cuda::getDefaultCUDAStream())
    throw Error("a CUDA graph cannot be captured on the default stream (internal error)");
  c10::cuda::device_synchronize();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  // Thread-local mode: loader threads may keep allocating and copying on their own streams.
  graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  try {
    body();
  } catch (...) {
    try {
      graph->capture_end();  // ends the (invalidated) capture; the error below is the cause
    } catch (...) {
    }
    throw;
  }
  graph->capture_end();
  impl_->graph = std::move(graph);
#else
  (void)body;
  throw Error("CUDA graphs need LibTorch 2.x", "train.cuda_graph");
#endif
}

void StepGraph::replay() {
  if (!impl_->graph) throw Error("replay of a CUDA graph that was not captured (internal error)");
  impl_->graph->replay();
}

bool StepGraph::captured() const { return impl_->graph != nullptr; }

at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device& device,
                                std::shared_ptr<void>& ready) {
  c10::cuda::CUDAGuard device_guard(device.index());
  thread_local std::optional<c10::cuda::CUDAStream> stream;
  if (!stream || stream->device_index() != device.index())
    stream = c10::cuda::getStreamFromPool(false, device.index());
  c10::cuda::CUDAStreamGuard stream_guard(*stream);
  at::Tensor d = host.to(at::TensorOptions().device(device), /*non_blocking=*/true);
  auto event = std::make_shared<at::cuda::CUDAEvent>();
  event->record(*stream);
  ready = event;
  return d;
}

void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t) {
  if (!ready || !t.defined() || !t.is_cuda()) return;
  const auto current = c10::cuda::getCurrentCUDAStream(t.device().index());
  static_cast<at::cuda::CUDAEvent*>(ready.get())->block(current);
  t.record_stream(current);
}

}  // namespace dtrain::detail
