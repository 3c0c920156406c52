// Note [fused BatchNorm]: a ResNet block normalizes each convolution's output, adds the shortcut
// after its last BatchNorm and applies ReLU. In LibTorch's ops on channels-last CUDA tensors that
// is four kernels for BatchNorm's training forward and backward (collect statistics, transform,
// backward reduce, backward element-wise), then the add and the ReLU and their backwards, each a
// full pass over the activations: memory traffic, not arithmetic, is what they cost. On CUDA dtrain
// does the whole y = relu(batch_norm(x) + residual) in one reduction and one pointwise pass each
// way (cuda/batch_norm.cu):
//   forward:  one pass sums each channel (shifted by the channel's first value, so that the
//             variance does not cancel), the last block to finish folds the blocks' sums (in
//             double, in block order: deterministic) into mean, 1/std, scale and shift and updates
//             the running statistics as torch.nn.BatchNorm2d does (momentum, unbiased variance,
//             num_batches_tracked + 1); a second pass writes y = relu(x * scale + shift + r) once.
//   backward: one pass sums g = dy masked where y = 0 (ReLU) and g * (x - mean) per channel
//             (writing g as the shortcut's gradient where there is a shortcut), whose last block
//             gives dweight, dbias and the coefficients of dx = k1 g + kx (x - mean) + kb; a second
//             pass writes dx.
//   junctions: a block's output feeds two paths of the next block (its first convolution and its
//             shortcut), whose gradients autograd would add in a pass of its own before this
//             backward reads the sum. fused_batch_norm_forked returns y twice over one storage,
//             so that each use's gradient comes to the backward apart, and its reduction reads
//             both and adds them as it goes (the sum is rounded once, in fp32).
// y and the gradients are in x's dtype (fp32, fp16 or bf16, as LibTorch's BatchNorm under
// autocast), the arithmetic in fp32, the statistics and parameter gradients summed in fp32 per
// thread and in double across blocks. The kernels allocate nothing beyond the caching allocator's
// tensors, so the step's CUDA graph captures them. With SyncBatchNorm (BatchNormState::exchange)
// each reduction stops at this rank's per-channel values (the forward's count, mean and sum of
// squared deviations; the backward's two sums), the exchange combines them over the ranks (NCCL,
// captured with the step), and a small kernel finishes what the last block would have: the
// statistics merged in rank order, in double (Chan's formula), or the coefficients of dx.
// model.fused_kernels=false keeps LibTorch's ops for comparison; tests/gpu/test_batch_norm.cpp
// checks both against ATen in double.
#pragma once

#include <ATen/ATen.h>

#include <array>

namespace dtrain::detail {

// SyncBatchNorm's two collectives (Note [BatchNorm on N ranks] in dist/batch_norm_buffers.h), as
// the BatchNorm ops call them; models/batch_norm.h makes one of a run's communicator. Both take
// float64 tensors on x's device and are ordered after the current stream's work and before its
// later work (NCCL: by events, also inside a CUDA graph's capture); every rank calls them in the
// same order.
class BatchNormExchange {
 public:
  virtual ~BatchNormExchange() = default;
  virtual int world() const = 0;
  // (world, n): every rank's `local` (n,), in rank order.
  virtual at::Tensor all_gather(const at::Tensor& local) = 0;
  // `t` summed over the ranks, in place.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
};

// One BatchNorm2d's parameters, buffers and mode (as the module holds them).
struct BatchNormState {
  at::Tensor weight, bias;               // fp32 (C,)
  at::Tensor running_mean, running_var;  // fp32 (C,), updated in training
  at::Tensor num_batches_tracked;        // int64 scalar, + 1 in training
  double eps = 1e-5;
  double momentum = 0.1;
  bool training = true;
  // In training, the statistics over every rank's rows (SyncBatchNorm): the forward's reduction
  // writes this rank's count, mean and sum of squared deviations per channel, the exchange
  // gathers every rank's, and one kernel merges them in rank order (the same bits on every rank)
  // before the pointwise pass; the backward's two sums per channel are summed over the ranks
  // likewise before dx. The weight and bias gradients stay this rank's (the gradient all-reduce
  // averages them). Null: this rank's rows alone.
  BatchNormExchange* exchange = nullptr;
};

// Whether fused_batch_norm handles these tensors: a CUDA build; x 4-d (N, C, H, W) channels-last
// contiguous on CUDA in fp32, fp16 or bf16 with 1 <= C <= 16384 and, in training, N·H·W >= 2;
// the state's weight, bias and running statistics fp32 (C,) on x's device and the counter defined;
// residual undefined or of x's shape, dtype and layout.
bool fused_batch_norm_applies(const at::Tensor& x, const at::Tensor& residual,
                              const BatchNormState& bn);

// y = [relu](batch_norm(x) [+ residual]) with batch statistics in training (over every rank's
// rows with bn.exchange; the running statistics updated in place) and the running ones in eval;
// y in x's dtype and layout.
// Differentiable in x, residual, weight and bias.
at::Tensor fused_batch_norm(const at::Tensor& x, const at::Tensor& residual,
                            const BatchNormState& bn, bool relu);

// fused_batch_norm's y twice, over one storage, for two uses (Note [fused BatchNorm]: a block's
// output feeds the next block's convolution and its shortcut): the backward reads the two uses'
// gradients together where autograd would sum them first in a pass of its own. Either may go
// unused.
std::array<at::Tensor, 2> fused_batch_norm_forked(const at::Tensor& x, const at::Tensor& residual,
                                                  const BatchNormState& bn, bool relu);

}  // namespace dtrain::detail
