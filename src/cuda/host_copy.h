// Device-to-host copies that a background thread reads (the checkpoint writer's snapshot,
// checkpoint/snapshot.h): page-locked host buffers, so that a copy into one is queued on the
// stream and returns at once, and a mark on the stream that the thread waits for before it reads
// them. A CPU build (src/cuda/stub/) has plain host memory and nothing to wait for.
#pragma once

#include <ATen/ATen.h>

#include <memory>

namespace dtrain::detail {

// An uninitialized host tensor: page-locked (pinned) memory for copies from a CUDA device
// (`for_device` a CUDA device), plain memory otherwise and in a CPU build.
at::Tensor host_buffer(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device& for_device);
// A mark on the current stream of `device` (an event recorded there, after the work queued so
// far); null for a CPU device and in a CPU build.
std::shared_ptr<void> mark_current_stream(const at::Device& device);
// Blocks the calling thread until the GPU has passed `mark`; returns at once for a null one.
void wait_for_mark(const std::shared_ptr<void>& mark);

}  // namespace dtrain::detail
