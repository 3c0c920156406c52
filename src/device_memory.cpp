#include <c10/util/Exception.h>

#include <cstring>

#include "dtrain/detail/cuda_graph.h"
#include "dtrain/detail/device_memory.h"
#include "dtrain/detail/fused_loss.h"
#include "dtrain/error.h"

namespace dtrain::detail {

#if !DTRAIN_WITH_CUDA
// CPU build: there is no device allocator to ask or cap.
MemoryStats memory_stats(const at::Device&) { return {}; }
void reset_peak_memory(const at::Device&) {}
void empty_cache(const at::Device&) {}
void set_memory_fraction(const at::Device&, double) {}

// No streams or graphs without CUDA; a CPU device never asks for them.
void synchronize(const at::Device&) {}
bool cuda_graphs_available() { return false; }
struct SideStreamGuard::Impl {};
SideStreamGuard::SideStreamGuard(const at::Device&) {}
SideStreamGuard::~SideStreamGuard() = default;
struct StepGraph::Impl {};
StepGraph::StepGraph(const at::Device&) {}
StepGraph::~StepGraph() = default;
void StepGraph::capture(const std::function<void()>&) {
  throw Error("CUDA graphs need a CUDA build of dtrain", "train.cuda_graph");
}
void StepGraph::replay() { throw Error("CUDA graphs need a CUDA build of dtrain", "train.cuda_graph"); }
bool StepGraph::captured() const { return false; }
at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device&, std::shared_ptr<void>&) {
  return host;
}
void wait_ready(const std::shared_ptr<void>&, const at::Tensor&) {}
bool fused_cross_entropy_applies(const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor fused_cross_entropy(const at::Tensor&, const at::Tensor&, bool) {
  throw Error("the fused cross-entropy needs a CUDA build of dtrain");
}
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
