// BatchNorm as dtrain's image models (resnet18, resnet50, cnn with model.batch_norm) run it:
// [relu](batch_norm(x) [+ residual]) through dtrain's fused CUDA op where it applies (Note [fused
// BatchNorm]), else LibTorch's module, or, with model.sync_batch_norm on several ranks, through
// statistics over every rank's samples (Note [BatchNorm on N ranks]): the fused op with an
// exchange on CUDA, sync_batch_norm() (ATen ops, any device) elsewhere. Both exchange the same
// values in the same layout, so ranks that take different paths still meet in each collective.
#pragma once

#include <torch/nn/modules/batchnorm.h>

#include <memory>

#include "cuda/fused_batch_norm.h"
#include "dtrain/comm.h"

namespace dtrain::detail {

// A run's communicator as the BatchNorm ops call it (cuda/fused_batch_norm.h: BatchNormExchange):
// float64 collectives on the data plane's communicator (NCCL on GPUs, inside a CUDA graph's
// capture too; MPI on CPUs).
class BatchNormSync : public BatchNormExchange {
 public:
  explicit BatchNormSync(Communicator& comm) : comm_(comm) {}
  int world() const override { return comm_.world(); }
  at::Tensor all_gather(const at::Tensor& local) override { return comm_.all_gather(local); }
  void all_reduce_sum(at::Tensor& t) override { comm_.all_reduce(t, ReduceOp::kSum); }

 private:
  Communicator& comm_;
};

// How a model runs its BatchNorms: dtrain's fused op where it applies (model.fused_kernels), and
// the statistics over every rank (model.sync_batch_norm on several ranks) or not (null).
struct NormMode {
  bool fused = false;
  BatchNormSync* sync = nullptr;
};

// [relu](bn(x) [+ residual]).
at::Tensor norm(torch::nn::BatchNorm2d bn, const at::Tensor& x, const at::Tensor& residual,
                bool relu, const NormMode& mode);

// norm()'s y twice (a block's output for the next block's convolution and its shortcut): over
// one storage, whose uses' gradients the fused op's backward reads apart, where the fused op
// applies; otherwise the same tensor twice.
std::array<at::Tensor, 2> norm_forked(torch::nn::BatchNorm2d bn, const at::Tensor& x,
                                      const at::Tensor& residual, bool relu, const NormMode& mode);

// batch_norm(x) in training with the mean and variance over every rank's rows (N and the
// spatial dimensions of x, (N, C, ...)): PyTorch's SyncBatchNorm in ATen ops, on any device and
// dtype (statistics in double, the rest in fp32, y in x's dtype and memory format). This rank's
// [mean (C), sum of squared deviations (C), rows] are all-gathered and merged in rank order
// (Chan's formula: the same bits on every rank); the running statistics are updated with the
// unbiased variance over every rank's rows, num_batches_tracked + 1. Backward sums dy and
// dy * (x - mean) per channel over the ranks (one all-reduce) for dx; the weight and bias
// gradients are this rank's (the gradient all-reduce averages them).
at::Tensor sync_batch_norm(const at::Tensor& x, const BatchNormState& bn,
                           BatchNormExchange& exchange);

}  // namespace dtrain::detail
