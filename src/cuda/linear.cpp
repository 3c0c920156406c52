// CUDA build: Linear with the bias gradient summed by dtrain's column-sum kernel (Note [Linear
// bias gradient] in fused_linear.h).
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include "cuda/check.h"
#include "cuda/column_sum.h"
#include "cuda/dtype_code.h"
#include "cuda/fused_linear.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool floating(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

struct Linear : public torch::autograd::Function<Linear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b) {
    const at::ScalarType dt = compat::autocast_enabled(c10::DeviceType::CUDA)
                                  ? compat::autocast_dtype(c10::DeviceType::CUDA)
                                  : w.scalar_type();
    const at::Tensor xc = x.to(dt), wc = w.to(dt);
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["x"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["b"] = static_cast<int64_t>(b.scalar_type());
    return at::linear(xc, wc, b.to(dt));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const int64_t out = w.size(0), in = w.size(1);
    const at::Tensor dy = grads[0].to(w.scalar_type()).reshape({-1, out}).contiguous();  // (N, out)
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0))
      dx = at::mm(dy, w).view(x.sizes()).to(
          static_cast<at::ScalarType>(ctx->saved_data["x"].toInt()));
    if (ctx->needs_input_grad(1)) {
      dw = weight_gradient(dy.t(), x.reshape({-1, in}),
                           static_cast<at::ScalarType>(ctx->saved_data["w"].toInt()));
    }
    if (ctx->needs_input_grad(2))
      db = column_sums(dy).to(static_cast<at::ScalarType>(ctx->saved_data["b"].toInt()));
    return {dx, dw, db};
  }
};

}  // namespace

at::Tensor weight_gradient(const at::Tensor& dy_t, const at::Tensor& x, at::ScalarType w_type) {
  return w_type == at::kFloat ? compat::mm_as_float(dy_t, x) : at::mm(dy_t, x).to(w_type);
}

at::Tensor column_sums(const at::Tensor& dy) {
  const int64_t rows = dy.size(0), cols = dy.size(1);
  const int splits = cuda::column_sum_splits(rows, cols, static_cast<int>(dy.element_size()));
  at::Tensor part = at::empty({splits, cols}, dy.options().dtype(at::kFloat));
  at::Tensor sums = at::empty({cols}, dy.options().dtype(at::kFloat));
  DTRAIN_CUDA_CHECK(cuda::column_sum(dtype_code(dy.scalar_type()), dy.data_ptr(), rows, cols,
                                     part.data_ptr<float>(), splits, sums.data_ptr<float>(),
                                     c10::cuda::getCurrentCUDAStream(dy.device().index())));
  return sums;
}

bool fused_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return x.defined() && weight.defined() && bias.defined() && x.is_cuda() && x.dim() >= 1 &&
         weight.dim() == 2 && bias.dim() == 1 && x.size(-1) == weight.size(1) &&
         bias.size(0) == weight.size(0) && weight.device() == x.device() &&
         bias.device() == x.device() && floating(x.scalar_type()) &&
         floating(weight.scalar_type()) && floating(bias.scalar_type()) && x.numel() > 0;
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return Linear::apply(x, weight, bias);
}

}  // namespace dtrain::detail
