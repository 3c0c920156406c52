// A communicator of one rank, in process: every collective is the identity (the average of one
// value is itself, an all-gather stacks the one tensor). The unit tier runs the engines on it
// without MPI or a launcher (tests/unit/test_engines.cpp).
#pragma once

#include <memory>
#include <string>

#include "dtrain/comm.h"

namespace dtrain::test {

class LocalCommunicator : public Communicator {
 public:
  std::string backend() const override { return "local"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce(at::Tensor&, ReduceOp) override {}
  std::unique_ptr<Work> all_reduce_async(at::Tensor&, ReduceOp) override {
    return std::make_unique<Done>();
  }
  void broadcast(at::Tensor&, int) override {}
  at::Tensor all_gather(const at::Tensor& t) override { return t.unsqueeze(0).clone(); }
  void barrier() override {}

 private:
  struct Done : Work {
    void wait() override {}
  };
};

}  // namespace dtrain::test
