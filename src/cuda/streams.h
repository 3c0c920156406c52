// Host-to-device copies on the loader's own CUDA streams. In a CPU build (src/cuda/stub/) the
// "copy" returns the host tensor and there is nothing to wait for.
#pragma once

#include <ATen/ATen.h>

#include <memory>

namespace dtrain::detail {

// Host-to-device copy on a side stream owned by the calling thread (loader threads), without
// waiting for it: returns the device tensor and sets `ready` to an event recorded after the copy.
at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device& device,
                                std::shared_ptr<void>& ready);
// The calling thread's side stream on `device`, the one copy_to_device_async copies on, as a
// cudaStream_t (null in a CPU build), and an uninitialized tensor allocated for it (the caching
// allocator ties the block to that stream): what the GPU JPEG decoder (src/data/images/gpu_decode.h)
// works on and writes into, so that a loader thread's decodes and copies share one stream.
void* loader_stream(const at::Device& device);
at::Tensor empty_on_loader_stream(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device& device);
// Makes the current stream wait for `ready` (from copy_to_device_async) and tells the caching
// allocator that `t` is used on the current stream, so its memory is not reused too early.
void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t);

// Note [data wait]
// The "data" phase is meant to say how long the GPU starved for input. Measured on the host
// alone it does not: the host runs ahead of the GPU (a CUDA graph replay or an eager step returns
// once its kernels are queued), uses up the prefetched batches, and then waits for the loader
// while the GPU still works through the steps it was given. That wait costs nothing. So the
// trainer marks the end of each step's GPU work (QueueMark) and, when a batch arrives, counts the
// wait as data only if the GPU had finished that work by then; otherwise as compute, since the
// GPU was the limit. It can still overstate the data share (the GPU may have run dry late in the
// wait), never understate it.

// A mark at the end of the work queued so far on the current stream of `device`: pending() says
// whether the GPU still has that work to do, without waiting for it. See Note [data wait]. On a
// CPU device (and in a CPU build) nothing is ever pending.
class QueueMark {
 public:
  void record(const at::Device& device);
  bool pending() const;

 private:
  std::shared_ptr<void> event_;
};

}  // namespace dtrain::detail
