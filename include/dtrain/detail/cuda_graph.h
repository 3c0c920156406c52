// CUDA streams and graphs for the trainer and the loader (CUDA builds; a CPU build answers
// "not available" and its functions throw, but nothing calls them for a CPU device).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>

namespace dtrain::detail {

// Waits for all work queued on `device` (no-op for a CPU device).
void synchronize(const at::Device& device);

// Whether this build can capture and replay CUDA graphs.
bool cuda_graphs_available();

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

// Host-to-device copy on a side stream owned by the calling thread (loader threads), without
// waiting for it: returns the device tensor and sets `ready` to an event recorded after the copy.
at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device& device,
                                std::shared_ptr<void>& ready);
// Makes the current stream wait for `ready` (from copy_to_device_async) and tells the caching
// allocator that `t` is used on the current stream, so its memory is not reused too early.
void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t);

}  // namespace dtrain::detail
