// CUDA build: the autograd wrapper of the fused cross-entropy kernels (cross_entropy.cu).
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "cuda/check.h"
#include "cuda/dtype_code.h"
#include "cuda/fused_loss.h"

namespace dtrain::cuda {
cudaError_t cross_entropy_forward(int dtype, const void* x, const int64_t* targets, int64_t rows,
                                  int64_t vocab, float smoothing, float* loss, float* lse,
                                  cudaStream_t stream);
cudaError_t cross_entropy_backward(int dtype, const void* x, const int64_t* targets, int64_t rows,
                                   int64_t vocab, const float* lse, const float* grad, float scale,
                                   float smoothing, void* dx, cudaStream_t stream);
}  // namespace dtrain::cuda

namespace dtrain::detail {
namespace {

struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, bool mean, bool grad_in_logits,
                            double smoothing) {
    const at::Tensor x = logits.contiguous();
    const at::Tensor t = targets.contiguous();
    const int64_t rows = x.size(0), vocab = x.size(1);
    auto f = x.options().dtype(at::kFloat);
    at::Tensor loss = at::empty({rows}, f), lse = at::empty({rows}, f);
    DTRAIN_CUDA_CHECK(cuda::cross_entropy_forward(
        dtype_code(x.scalar_type()), x.data_ptr(), t.data_ptr<int64_t>(), rows, vocab,
        static_cast<float>(smoothing), loss.data_ptr<float>(), lse.data_ptr<float>(),
        c10::cuda::getCurrentCUDAStream(x.device().index())));
    ctx->save_for_backward({x, t, lse});
    ctx->saved_data["scale"] = mean && rows > 0 ? 1.0 / static_cast<double>(rows) : 1.0;
    ctx->saved_data["in_place"] = grad_in_logits;
    ctx->saved_data["smoothing"] = smoothing;
    return mean ? loss.mean() : loss.sum();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& t = saved[1];
    const at::Tensor& lse = saved[2];
    const at::Tensor g = grads[0].to(at::kFloat).contiguous();
    // In place: each element is read and then overwritten by the same thread.
    at::Tensor dx = ctx->saved_data["in_place"].toBool() ? x : at::empty_like(x);
    DTRAIN_CUDA_CHECK(cuda::cross_entropy_backward(
        dtype_code(x.scalar_type()), x.data_ptr(), t.data_ptr<int64_t>(), x.size(0), x.size(1),
        lse.data_ptr<float>(), g.data_ptr<float>(),
        static_cast<float>(ctx->saved_data["scale"].toDouble()),
        static_cast<float>(ctx->saved_data["smoothing"].toDouble()), dx.data_ptr(),
        c10::cuda::getCurrentCUDAStream(x.device().index())));
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_cross_entropy_applies(const at::Tensor& logits, const at::Tensor& targets) {
  const auto st = logits.scalar_type();
  return logits.is_cuda() && logits.dim() == 2 && logits.size(1) >= 1024 &&
         (st == at::kFloat || st == at::kHalf || st == at::kBFloat16) && targets.dim() == 1 &&
         targets.scalar_type() == at::kLong && targets.size(0) == logits.size(0) &&
         targets.device() == logits.device();
}

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, bool mean,
                               bool grad_in_logits, double label_smoothing) {
  return FusedCrossEntropy::apply(logits, targets, mean, grad_in_logits, label_smoothing);
}

}  // namespace dtrain::detail
