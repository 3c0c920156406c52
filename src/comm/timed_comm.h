// TimedCommunicator: another communicator's collectives, unchanged, with the host seconds spent in
// them counted. The Trainer hands one to a model's SyncBatchNorm (model.sync_batch_norm), whose
// collectives run inside forward and backward, so that the step's phase times count them as
// communication, not compute (on MPI the host waits in them; over NCCL only the launches are the
// host's, as for the gradient buckets).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "util/clock.h"

namespace dtrain::detail {

class TimedCommunicator : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}

  // The seconds counted since the last call.
  double take_seconds() {
    const double s = seconds_;
    seconds_ = 0;
    return s;
  }

  std::string backend() const override { return inner_.backend(); }
  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  void all_reduce(at::Tensor& t, ReduceOp op) override {
    timed([&] { inner_.all_reduce(t, op); });
  }
  std::unique_ptr<Work> all_reduce_async(at::Tensor& t, ReduceOp op) override {
    std::unique_ptr<Work> w;
    timed([&] { w = inner_.all_reduce_async(t, op); });
    return w;
  }
  void broadcast(at::Tensor& t, int root) override {
    timed([&] { inner_.broadcast(t, root); });
  }
  at::Tensor all_gather(const at::Tensor& t) override {
    at::Tensor out;
    timed([&] { out = inner_.all_gather(t); });
    return out;
  }
  void barrier() override {
    timed([&] { inner_.barrier(); });
  }
  void abort() override { inner_.abort(); }
  MPI_Comm mpi_handle() const override { return inner_.mpi_handle(); }

 private:
  template <typename F>
  void timed(F&& f) {
    const auto t0 = Clock::now();
    f();
    seconds_ += seconds_since(t0);
  }

  Communicator& inner_;
  // Added to by whichever thread runs the op (autograd's device thread in a CUDA backward), read
  // after backward() has returned: the engine's completion orders the two.
  double seconds_ = 0;
};

}  // namespace dtrain::detail
