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
// Makes the current stream wait for `ready` (from copy_to_device_async) and tells the caching
// allocator that `t` is used on the current stream, so its memory is not reused too early.
void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t);

}  // namespace dtrain::detail
