// Host-to-device copies on the loader's own CUDA streams. In a CPU build (src/cuda/stub/) the
// "copy" returns the host tensor and there is nothing to wait for.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

namespace dtrain::detail {

// Host-to-device copy on a side stream owned by the calling thread (loader threads), without
// waiting for it: returns the device tensor and sets `ready` to an event recorded after the copy.
at::Tensor copy_to_device_async(const at::Tensor& host, const at::Device& device,
                                std::shared_ptr<void>& ready);
// The calling thread's side stream on `device`, the one copy_to_device_async copies on, as a
// cudaStream_t (null in a CPU build), and an uninitialized tensor allocated for it (the caching
// allocator ties the block to that stream): what the GPU JPEG decoder
// (src/data/images/gpu_decode.h) works on and writes into, so that a loader thread's decodes and
// copies share one stream.
void* loader_stream(const at::Device& device);
at::Tensor empty_on_loader_stream(at::IntArrayRef sizes, at::ScalarType dtype,
                                  const at::Device& device);
// `work` run with the calling thread's side stream current on `device` (a loader thread's device
// operations on its decoded batch), that stream then waited for: its results are complete when
// this returns, as the decoder's are. A CPU build runs `work` alone.
void run_on_loader_stream(const at::Device& device, const std::function<void()>& work);
// Makes the current stream wait for `ready` (from copy_to_device_async) and tells the caching
// allocator that `t` is used on the current stream, so its memory is not reused too early.
void wait_ready(const std::shared_ptr<void>& ready, const at::Tensor& t);

// Note [data wait]:
// The "data" phase is meant to say how long the GPU starved for input. Measured on the host
// alone it does not: the host runs ahead of the GPU (a CUDA graph replay or an eager step returns
// once its kernels are queued), uses up the prefetched batches, and then waits for the loader
// while the GPU still works through the steps it was given. That wait costs nothing. So the
// trainer marks the end of each step's GPU work and, when the next batch has arrived (the current
// stream already waiting for it: Loader::next), marks the stream again; on the GPU's clock the
// time between the two marks is how long the training stream sat with nothing to do before the
// next step could start. Of a host wait of w seconds, min(w, that gap) is data and the rest
// compute. The marks are read once the GPU has passed them (a query, not a wait), a step or so
// later; reading the loss, which waits for the GPU, settles all of them. An earlier rule counted
// the whole wait as data when the GPU had finished its steps by the time the batch arrived: with
// data.decode gpu the batch is decoded while the step runs and arrives just after it ends, and an
// H100 run at 97-99% of the synthetic rate showed 15-53% of its time as data.

// The data wait of Note [data wait], from the GPU's own clock. On a CPU device (and in a CPU
// build) every wait is data.
class DataWaitClock {
 public:
  DataWaitClock();
  ~DataWaitClock();
  DataWaitClock(const DataWaitClock&) = delete;
  DataWaitClock& operator=(const DataWaitClock&) = delete;

  // The end of a step's GPU work: a mark on the current stream of `device`.
  void step_queued(const at::Device& device);
  // The next batch arrived after the host waited `seconds` for it, and the current stream of
  // `device` waits for it.
  void batch_arrived(const at::Device& device, double seconds);
  // The data seconds of the waits whose marks the GPU has passed (with `wait_for_gpu`, of every
  // wait, waiting for the GPU to pass them), each wait settled once; the rest of a wait is compute.
  double settle(bool wait_for_gpu = false);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The intervals between consecutive steps' ends on the GPU's own clock: dtrain bench's step
// percentiles. The host's time between two steps says little on a GPU (a CUDA graph replay
// returns once queued: one H100 bench gave a median of 0.85 ms and a 90th percentile of 73 ms for
// steps of 26 ms), so each step leaves a timed mark on the current stream of `device`. On a CPU
// device (and in a CPU build) nothing is marked: the host's clock is the device's there.
class StepMarks {
 public:
  StepMarks();
  ~StepMarks();
  StepMarks(const StepMarks&) = delete;
  StepMarks& operator=(const StepMarks&) = delete;

  // A mark after the work queued so far on the current stream of `device` (none on a CPU).
  void mark(const at::Device& device);
  // The seconds between consecutive marks, one fewer than the marks (waiting for the GPU to pass
  // the last); empty with fewer than two marks. Forgets the marks.
  std::vector<double> intervals();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::detail
