// Loader: worker threads claim plan indices in order, but never more than `prefetch` ahead of
// the batch next() returns, so a finished batch always has a free slot (i % prefetch) to wait
// in. Loading happens outside the mutex; next() hands batches out strictly in plan order.
//
// Note [batches on the device]:
// A worker copies its batch to the GPU (on its own stream) only once it is the one next() hands
// out after the batch in use: batch i's copy starts when next() has returned batch i - 1, so it
// runs while step i - 1 computes, and at most two batches of the loader (the step's and the next)
// hold device memory, not `prefetch` + 1. The others wait in pinned host memory. ResNet-50 at
// batch 128 keeps 19 MB of uint8 pixels a batch: three fewer on the device lowered its peak by
// about 60 MB (docs/PERFORMANCE.md). Copies started by next() on the training thread instead
// queue behind the step on its stream, and the GPU waited for data (11-14% of the step).
// A dataset that makes its batches on the device itself (data.decode gpu: a worker decodes
// into device memory as it fetches) has no host copy to hold back: there every claimed batch
// holds device memory, at most data.prefetch of them (claims never run further ahead of next())
// plus the step's, so data.prefetch + 1.
#include "dtrain/data/loader.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include <c10/util/Exception.h>

#include "cuda/streams.h"
#include "dtrain/error.h"

namespace dtrain {

Loader::Loader(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> plan,
               LoaderOptions options, std::vector<int64_t> epochs)
    : dataset_(std::move(dataset)),
      plan_(std::move(plan)),
      epochs_(std::move(epochs)),
      options_(options) {
  if (!dataset_) throw Error("the loader needs a dataset, got none");
  if (!epochs_.empty() && epochs_.size() != plan_.size())
    throw Error("the loader got " + std::to_string(epochs_.size()) + " epochs for a plan of " +
                std::to_string(plan_.size()) + " batches (internal error)");
  if (options_.workers < 0) {
    throw Error("must be >= 0, got " + std::to_string(options_.workers), "data.workers");
  }
  if (options_.prefetch < 1) {
    throw Error("must be >= 1, got " + std::to_string(options_.prefetch), "data.prefetch");
  }
  if (options_.workers == 0) return;

  slots_.resize(static_cast<size_t>(options_.prefetch));
  errors_.resize(static_cast<size_t>(options_.prefetch));
  // No more threads than batches: an idle worker would only wait for the destructor.
  const int64_t n = std::min<int64_t>(options_.workers, size());
  try {
    workers_.reserve(static_cast<size_t>(n));
    for (int64_t w = 0; w < n; ++w) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_produce_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_produce_.notify_all();
  cv_consume_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void Loader::worker_loop() {
  const int64_t prefetch = options_.prefetch;
  for (;;) {
    int64_t i = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_produce_.wait(lock, [&] {
        return stop_ || next_to_claim_ >= size() || next_to_claim_ < next_to_return_ + prefetch;
      });
      if (stop_ || next_to_claim_ >= size()) return;
      i = next_to_claim_++;
    }
    // Slot i % prefetch is free: index i - prefetch was already returned by next().
    std::optional<Loaded> batch;
    std::exception_ptr error;
    try {
      batch = load(i, /*copy_to_device=*/false);
      // The copy to the device waits for its turn (Note [batches on the device]).
      if (copy_pending(*batch)) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_produce_.wait(lock, [&] { return stop_ || i < next_to_return_ + kOnDeviceAhead; });
          if (stop_) return;
        }
        start_copies(*batch);
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto s = static_cast<size_t>(i % prefetch);
      if (error) {
        errors_[s] = error;
      } else {
        slots_[s] = std::move(batch);
      }
    }
    cv_consume_.notify_all();
  }
}

Loader::Loaded Loader::load(int64_t i, bool copy_to_device) const {
  Loaded l;
  const auto& indices = plan_[static_cast<size_t>(i)];
  l.batch =
      dataset_->fetch(indices, epochs_.empty() ? 0 : epochs_[static_cast<size_t>(i)], pinned());
  // Inputs the dataset made on the device (an image folder with data.decode gpu, Note [GPU
  // decoding]) get the event too, whatever the copies do: next() then ties them to the run's
  // stream (wait_ready), so that their memory is not reused while a step still reads it.
  const bool on_device =
      options_.device.is_cuda() && l.batch.inputs.defined() && l.batch.inputs.is_cuda();
  if (on_device || (pinned() && copy_to_device)) start_copies(l);
  return l;
}

bool Loader::pinned() const {
  // Pinned host memory only helps (and only exists) for a copy to a CUDA device.
  return options_.pin_memory && options_.device.is_cuda();
}

bool Loader::copy_pending(const Loaded& l) const {
  auto on_host = [](const at::Tensor& t) { return t.defined() && !t.is_cuda(); };
  return pinned() && !l.ready && (on_host(l.batch.inputs) || on_host(l.batch.targets));
}

void Loader::start_copies(Loaded& l) const {
  Batch& b = l.batch;
  const Batch host = b;
  const bool on_device = b.inputs.defined() && b.inputs.is_cuda();
  std::shared_ptr<void> ready;  // one event after both copies: the consumer waits once
  try {
    if (b.inputs.defined())
      b.inputs = detail::copy_to_device_async(b.inputs, options_.device, ready);
    if (b.targets.defined())
      b.targets = detail::copy_to_device_async(b.targets, options_.device, ready);
  } catch (const c10::OutOfMemoryError&) {
    // The device is full right now (a step that ran out of memory still holds it, and will let
    // go to retry with a smaller micro-batch): what is still on the host stays in pinned host
    // memory and next() copies it on the run's stream, after the step.
    b.targets = host.targets;
    if (!on_device) b.inputs = host.inputs, ready.reset();
  }
  l.ready = std::move(ready);
}

Batch Loader::to_device(Loaded l) const {
  Batch b = std::move(l.batch);
  if (options_.device.is_cpu()) return b;
  if (l.ready) {  // made or copied by a worker: the current stream waits (Note [the run's stream])
    detail::wait_ready(l.ready, b.inputs);
    detail::wait_ready(l.ready, b.targets);
  }
  // What is still on the host is copied on the current stream.
  const auto opts = at::TensorOptions().device(options_.device);
  if (b.inputs.defined() && b.inputs.device() != options_.device)
    b.inputs = b.inputs.to(opts, /*non_blocking=*/true);
  if (b.targets.defined() && b.targets.device() != options_.device)
    b.targets = b.targets.to(opts, /*non_blocking=*/true);
  return b;
}

std::optional<Batch> Loader::next() {
  if (next_to_return_ >= size()) return std::nullopt;
  if (options_.workers == 0) {
    // The whole load is a stall here. A batch that fails is passed over, as with workers.
    const int64_t i = next_to_return_++;
    const auto start = std::chrono::steady_clock::now();
    auto add_wait = [&] {
      wait_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    Loaded b;
    try {
      b = load(i, /*copy_to_device=*/false);
    } catch (...) {
      add_wait();
      throw;
    }
    add_wait();
    return to_device(std::move(b));
  }

  const auto s = static_cast<size_t>(next_to_return_ % options_.prefetch);
  std::optional<Loaded> batch;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return slots_[s].has_value() || errors_[s] != nullptr; };
    if (!ready()) {
      const auto start = std::chrono::steady_clock::now();
      cv_consume_.wait(lock, ready);
      wait_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (errors_[s]) {
      error = std::exchange(errors_[s], nullptr);
    } else {
      batch = std::move(slots_[s]);
      slots_[s].reset();
    }
    ++next_to_return_;
  }
  cv_produce_.notify_all();
  if (error) std::rethrow_exception(error);
  return to_device(std::move(*batch));
}

}  // namespace dtrain
