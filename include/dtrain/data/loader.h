// Loader: turns a list of index batches into Batches, prepared ahead by worker threads.
// Invariants: batches come out in the order of the plan, whatever order workers finish in; at
// most `prefetch` batches wait in memory; an exception in a worker is rethrown by next() on the
// caller's thread; the destructor stops and joins every worker (never throws, never hangs).
// With a CUDA device and pinned memory, worker threads also start each batch's copy to the GPU
// on a stream of their own, when it is the batch after the one in use (so at most two of the
// loader's batches are on the device; Note [batches on the device]); next() makes the caller's
// current stream wait for that copy (on the GPU, not on the host), so copies overlap with compute.
// Without workers (or pinning), or when a worker's copy finds the device out of memory, next()
// copies on the current stream. Inputs a dataset made on the device itself (an image folder
// decoding on the GPU) are handed on without a copy, tied to the current stream by next() like a
// worker's copies; those hold device memory from their fetch on: up to data.prefetch + 1 batches
// (Note [batches on the device]), where copied batches hold it for two at most.
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dtrain/data/dataset.h"

namespace dtrain {

struct LoaderOptions {
  int64_t workers = 2;   // 0 = load on the caller's thread
  int64_t prefetch = 4;  // batches ready ahead (>= 1)
  bool pin_memory = true;
  at::Device device = at::kCPU;  // where next() delivers
};

class Loader {
 public:
  // `epochs[i]`: the training epoch plan batch i belongs to, passed to Dataset::fetch (empty: 0
  // for every batch, as for evaluation).
  Loader(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> plan,
         LoaderOptions options, std::vector<int64_t> epochs = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of the plan, on options.device; nullopt when the plan is done.
  std::optional<Batch> next();
  int64_t size() const { return static_cast<int64_t>(plan_.size()); }
  // Seconds next() spent waiting for a batch that was not ready (data-loading stall).
  double wait_seconds() const { return wait_seconds_; }

 private:
  void worker_loop();
  struct Loaded {
    Batch batch;
    std::shared_ptr<void> ready;  // the copy to the device in flight (null: none)
  };
  // Fetches plan batch i; starts its copies to the device when `copy_to_device` (and always for
  // inputs the dataset made on the device, to give them their event).
  Loaded load(int64_t i, bool copy_to_device) const;
  bool pinned() const;                       // copies to the device go through pinned memory
  bool copy_pending(const Loaded& l) const;  // host tensors a worker should still copy
  void start_copies(Loaded& l) const;        // on the calling thread's stream; OOM: left on host
  // A worker copies batch i once next() has returned batch i - kOnDeviceAhead (Note [batches on
  // the device]).
  static constexpr int64_t kOnDeviceAhead = 1;
  Batch to_device(Loaded b) const;

  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::vector<int64_t>> plan_;
  std::vector<int64_t> epochs_;  // per plan batch, or empty
  LoaderOptions options_;

  std::mutex mu_;
  std::condition_variable cv_produce_, cv_consume_;
  std::vector<std::optional<Loaded>> slots_;  // ring of size prefetch, slot i % prefetch
  std::vector<std::exception_ptr> errors_;
  int64_t next_to_claim_ = 0;   // next plan index a worker takes
  int64_t next_to_return_ = 0;  // next plan index next() returns
  bool stop_ = false;
  std::vector<std::thread> workers_;
  double wait_seconds_ = 0.0;
};

}  // namespace dtrain
