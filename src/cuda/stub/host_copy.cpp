// CPU build: host buffers are plain memory, and a copy is done when it returns (cuda/host_copy.h).
#include "cuda/host_copy.h"

namespace dtrain::detail {

at::Tensor host_buffer(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device&) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype));
}
std::shared_ptr<void> mark_current_stream(const at::Device&) { return nullptr; }
void wait_for_mark(const std::shared_ptr<void>&) {}

}  // namespace dtrain::detail
