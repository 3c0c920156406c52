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
void run_on_loader_stream(const at::Device&, const std::function<void()>& work) { work(); }

// Every wait is data: there is no GPU to have kept busy.
struct DataWaitClock::Impl {
  double data = 0;
};
DataWaitClock::DataWaitClock() : impl_(std::make_unique<Impl>()) {}
DataWaitClock::~DataWaitClock() = default;
void DataWaitClock::step_queued(const at::Device&) {}
void DataWaitClock::batch_arrived(const at::Device&, double seconds) { impl_->data += seconds; }
double DataWaitClock::settle(bool) {
  const double d = impl_->data;
  impl_->data = 0;
  return d;
}

// No GPU: nothing to mark; the host's clock times the steps.
struct StepMarks::Impl {};
StepMarks::StepMarks() : impl_(std::make_unique<Impl>()) {}
StepMarks::~StepMarks() = default;
void StepMarks::mark(const at::Device&) {}
std::vector<double> StepMarks::intervals() { return {}; }

}  // namespace dtrain::detail
