// The host copy of a checkpoint's tensors that a background write encodes while training goes
// on (Note [background saves], hooks/checkpoint_writer.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "checkpoint/state.h"

namespace dtrain::detail {

class HostSnapshot {
 public:
  // Starts a snapshot: the buffers are taken again from the first, in the order of copy().
  void begin() { next_ = 0; }
  // `tensors` copied into this snapshot's host buffers, which are allocated by reserve() or the
  // first copy() (page-locked for a CUDA device: cuda/host_copy.h) and again only where a tensor's
  // shape or dtype changed, so the host memory is held once and reused from save to save. From a
  // CUDA device the copies are queued on the current stream: read them only after finish()'s mark
  // has been passed. Names and order as given.
  NamedTensors copy(const NamedTensors& tensors, const at::Device& device);
  // The buffers copy() would take for `tensors`, allocated now and left as they are: done
  // before the first save (begin(), then reserve() in copy()'s order), so that no save pays
  // for the allocation (page-locking 1.4 GB takes about 0.7 s).
  void reserve(const NamedTensors& tensors, const at::Device& device);
  // Marks the current stream after the copies (null: nothing to wait for, a CPU device).
  std::shared_ptr<void> finish(const at::Device& device) const;
  // Bytes of host memory the buffers hold.
  int64_t bytes() const;

 private:
  // The next buffer, (re)allocated for `t` where it has none of t's shape and dtype.
  at::Tensor& take(const at::Tensor& t, const at::Device& device);

  std::vector<at::Tensor> buffers_;
  size_t next_ = 0;
};

}  // namespace dtrain::detail
