// CUDA build: the loader's asynchronous host-to-device copies, each on its thread's own stream,
// and the marks of the GPU's clock that the data wait is judged by (Note [data wait]).
#include "cuda/streams.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <deque>
#include <optional>

namespace dtrain::detail {

namespace {

// The calling thread's side stream on `device` (the caller guards the device).
c10::cuda::CUDAStream thread_stream(const at::Device& device) {
  thread_local std::optional<c10::cuda::CUDAStream> stream;
  if (!stream || stream->device_index() != device.index())
    stream = c10::cuda::getStreamFromPool(false, device.index());
  return *stream;
}

}  // namespace

void* loader_stream(const at::Device& device) {
  c10::cuda::CUDAGuard device_guard(device.index());
  return thread_stream(device).stream();
}

at::Tensor empty_on_loader_stream(at::IntArrayRef sizes, at::ScalarType dtype,
                                  const at::Device& device) {
  c10::cuda::CUDAGuard device_guard(device.index());
  c10::cuda::CUDAStreamGuard stream_guard(thread_stream(device));
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(device));
}

void run_on_loader_stream(const at::Device& device, const std::function<void()>& work) {
  c10::cuda::CUDAGuard device_guard(device.index());
  const c10::cuda::CUDAStream stream = thread_stream(device);
  {
    c10::cuda::CUDAStreamGuard stream_guard(stream);
    work();
  }
  stream.synchronize();
}

at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device& device,
                                std::shared_ptr<void>& ready) {
  c10::cuda::CUDAGuard device_guard(device.index());
  const c10::cuda::CUDAStream stream = thread_stream(device);
  c10::cuda::CUDAStreamGuard stream_guard(stream);
  at::Tensor d = host.to(at::TensorOptions().device(device), /*non_blocking=*/true);
  auto event = std::make_shared<at::cuda::CUDAEvent>();
  event->record(stream);
  ready = event;
  return d;
}

void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t) {
  if (!ready || !t.defined() || !t.is_cuda()) return;
  const auto current = c10::cuda::getCurrentCUDAStream(t.device().index());
  static_cast<at::cuda::CUDAEvent*>(ready.get())->block(current);
  t.record_stream(current);
}

namespace {

// A timed event after the work queued so far on the current stream of `device`.
std::shared_ptr<at::cuda::CUDAEvent> timed_mark(const at::Device& device) {
  auto e = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);  // timed
  e->record(c10::cuda::getCurrentCUDAStream(device.index()));
  return e;
}

}  // namespace

struct DataWaitClock::Impl {
  // A wait whose two marks the GPU has not yet been seen to pass.
  struct Wait {
    std::shared_ptr<at::cuda::CUDAEvent> step_end, next_start;
    double seconds = 0;
  };
  std::shared_ptr<at::cuda::CUDAEvent> step_end;  // the last step's mark
  std::deque<Wait> waits;
  double data = 0;  // settled, not yet taken
};

DataWaitClock::DataWaitClock() : impl_(std::make_unique<Impl>()) {}
DataWaitClock::~DataWaitClock() = default;

void DataWaitClock::step_queued(const at::Device& device) {
  if (device.is_cuda()) impl_->step_end = timed_mark(device);
}

void DataWaitClock::batch_arrived(const at::Device& device, double seconds) {
  Impl& m = *impl_;
  if (!device.is_cuda() || !m.step_end) {  // no step queued before it: the GPU had nothing to do
    m.data += seconds;
    return;
  }
  m.waits.push_back({m.step_end, timed_mark(device), seconds});
}

double DataWaitClock::settle(bool wait_for_gpu) {
  Impl& m = *impl_;
  while (!m.waits.empty()) {
    const Impl::Wait& w = m.waits.front();
    if (wait_for_gpu)
      w.next_start->synchronize();
    else if (!w.next_start->query())
      break;
    const double gap =
        std::max(0.0, static_cast<double>(w.step_end->elapsed_time(*w.next_start)) / 1e3);
    m.data += std::min(w.seconds, gap);
    m.waits.pop_front();
  }
  const double d = m.data;
  m.data = 0;
  return d;
}

struct StepMarks::Impl {
  // The marks the GPU has not yet been seen to pass (and the last one it passed, the start of the
  // next interval); the intervals already read off: memory stays bounded over long runs.
  std::deque<std::shared_ptr<at::cuda::CUDAEvent>> marks;
  std::vector<double> seconds;

  // Reads off the intervals whose end the GPU has passed (all of them with `wait`).
  void settle(bool wait) {
    while (marks.size() >= 2) {
      if (wait)
        marks[1]->synchronize();
      else if (!marks[1]->query())
        break;
      seconds.push_back(
          std::max(0.0, static_cast<double>(marks[0]->elapsed_time(*marks[1])) / 1e3));
      marks.pop_front();
    }
  }
};

StepMarks::StepMarks() : impl_(std::make_unique<Impl>()) {}
StepMarks::~StepMarks() = default;

void StepMarks::mark(const at::Device& device) {
  if (!device.is_cuda()) return;
  impl_->marks.push_back(timed_mark(device));
  impl_->settle(false);
}

std::vector<double> StepMarks::intervals() {
  Impl& m = *impl_;
  m.settle(true);
  m.marks.clear();
  std::vector<double> seconds;
  seconds.swap(m.seconds);
  return seconds;
}

}  // namespace dtrain::detail
