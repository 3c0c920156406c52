// CPU build: batches stay where they are; there is no copy to wait for.
#include "cuda/streams.h"

namespace dtrain::detail {

at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device&, std::shared_ptr<void>&) {
  return host;
}
void wait_ready(const std::shared_ptr<void>&, const at::Tensor&) {}
void QueueMark::record(const at::Device&) {}
bool QueueMark::pending() const { return false; }

}  // namespace dtrain::detail
