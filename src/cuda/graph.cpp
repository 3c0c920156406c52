// CUDA build: side streams and graph capture of the training step.
#include "cuda/graph.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/check.h"
#include "dtrain/error.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

// Thread-local capture mode, so that loader threads may keep allocating and copying on their own
// streams. A template, so that a LibTorch without that overload never compiles the call.
template <class Graph>
void begin_capture(Graph& graph) {
  if constexpr (compat::kHasCudaGraphs) {
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  } else {
    throw Error("CUDA graphs need LibTorch " + std::string(compat::kCudaGraphsSince) +
                    " (this is " + compat::libtorch_version() + ")",
                "train.cuda_graph");
  }
}

}  // namespace

void synchronize(const at::Device& device) {
  if (!device.is_cuda()) return;
  c10::cuda::CUDAGuard device_guard(device.index());
  c10::cuda::device_synchronize();
}

bool cuda_graphs_available() { return compat::kHasCudaGraphs; }

bool capturing(const at::Device& device) {
  if (!device.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DTRAIN_CUDA_CHECK(
      cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device.index()).stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

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
  c10::cuda::CUDAGuard device_guard(impl_->device.index());
  if (c10::cuda::getCurrentCUDAStream() == c10::cuda::getDefaultCUDAStream())
    throw Error("a CUDA graph cannot be captured on the default stream (internal error)");
  c10::cuda::device_synchronize();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  begin_capture(*graph);
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
}

void StepGraph::replay() {
  if (!impl_->graph) throw Error("replay of a CUDA graph that was not captured (internal error)");
  impl_->graph->replay();
}

bool StepGraph::captured() const { return impl_->graph != nullptr; }

}  // namespace dtrain::detail
