// The host copy of a checkpoint's tensors (checkpoint/snapshot.h).
#include "checkpoint/snapshot.h"

#include "cuda/host_copy.h"

namespace dtrain::detail {

at::Tensor& HostSnapshot::take(const at::Tensor& t, const at::Device& device) {
  if (next_ == buffers_.size()) buffers_.emplace_back();
  at::Tensor& b = buffers_[next_++];
  if (!b.defined() || b.sizes() != t.sizes() || b.scalar_type() != t.scalar_type())
    b = host_buffer(t.sizes(), t.scalar_type(), device);
  return b;
}

NamedTensors HostSnapshot::copy(const NamedTensors& tensors, const at::Device& device) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) {
      out.emplace_back(name, t);
      continue;
    }
    at::Tensor& b = take(t, device);
    b.copy_(t, /*non_blocking=*/t.is_cuda());
    out.emplace_back(name, b);
  }
  return out;
}

void HostSnapshot::reserve(const NamedTensors& tensors, const at::Device& device) {
  for (const auto& entry : tensors)
    if (entry.second.defined()) take(entry.second, device);
}

std::shared_ptr<void> HostSnapshot::finish(const at::Device& device) const {
  return mark_current_stream(device);
}

int64_t HostSnapshot::bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_)
    if (b.defined()) n += b.numel() * static_cast<int64_t>(b.element_size());
  return n;
}

}  // namespace dtrain::detail
