// CPU build: no streams and no graphs. Nothing asks for them on a CPU device; capture and replay
// throw in case something does.
#include "cuda/graph.h"
#include "dtrain/error.h"

namespace dtrain::detail {

void synchronize(const at::Device&) {}
bool cuda_graphs_available() { return false; }
bool capturing(const at::Device&) { return false; }

struct SideStreamGuard::Impl {};
SideStreamGuard::SideStreamGuard(const at::Device&) {}
SideStreamGuard::~SideStreamGuard() = default;

struct StepGraph::Impl {};
StepGraph::StepGraph(const at::Device&) {}
StepGraph::~StepGraph() = default;
void StepGraph::capture(const std::function<void()>&) {
  throw Error("CUDA graphs need a CUDA build of dtrain", "train.cuda_graph");
}
void StepGraph::replay() {
  throw Error("CUDA graphs need a CUDA build of dtrain", "train.cuda_graph");
}
bool StepGraph::captured() const { return false; }

}  // namespace dtrain::detail
