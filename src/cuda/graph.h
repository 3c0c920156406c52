// CUDA graphs of the training step, and the stream they are captured on. In a CPU build
// (src/cuda/stub/) graphs are "not available" and capture throws; nothing asks for them there.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace dtrain::detail {

// Waits for all work queued on `device` (no-op for a CPU device).
void synchronize(const at::Device& device);

// Whether this build can capture and replay CUDA graphs.
bool cuda_graphs_available();

// Whether `device`'s current stream is capturing a CUDA graph now (false for a CPU device and in
// a CPU build).
bool capturing(const at::Device& device);

// Makes a non-default stream of `device` current while alive (graphs cannot be captured on the
// default stream). Does nothing for a CPU device.
class SideStreamGuard {
 public:
  explicit SideStreamGuard(const at::Device& device);
  ~SideStreamGuard();
  SideStreamGuard(const SideStreamGuard&) = delete;
  SideStreamGuard& operator=(const SideStreamGuard&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One captured sequence of GPU work, replayed with a single launch. Tensors the work reads and
// writes keep their addresses: inputs are copied into tensors allocated before capture.
class StepGraph {
 public:
  explicit StepGraph(const at::Device& device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Records `body` on the current (non-default) stream without running it. Host code in `body`
  // runs once, now; only its GPU work is replayed. Throws if capture fails (nothing kept).
  void capture(const std::function<void()>& body);
  void replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::detail
