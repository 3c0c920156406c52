// CPU build: batches stay where they are; there is no copy to wait for.
#include "cuda/streams.h"

namespace dtrain::detail {

at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device&, std::shared_ptr<void>&) {
  return host;
}
void* loader_stream(const at::Device&) { return nullptr; }
at::Tensor empty_on_loader_stream(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device&) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype));
}
void wait_ready(const std::shared_ptr<void>&, const at::Tensor&) {}
void QueueMark::record(const at::Device&) {}
bool QueueMark::pending() const { return false; }

}  // namespace dtrain::detail
