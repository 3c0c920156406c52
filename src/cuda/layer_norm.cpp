// CUDA build: the autograd wrappers of the fused residual + LayerNorm kernels (layer_norm.cu,
// Note [fused residual LayerNorm] in fused_norm.h).
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "cuda/check.h"
#include "cuda/dtype_code.h"
#include "cuda/fused_norm.h"
#include "util/torch_compat.h"

namespace dtrain::cuda {
cudaError_t layer_norm_forward(int r_dtype, int y_dtype, const float* x, const void* r, float* s,
                               void* y, const float* w, const float* b, float* mean, float* rstd,
                               int64_t rows, int c, float eps, cudaStream_t stream);
cudaError_t layer_norm_backward(int r_dtype, int y_dtype, const void* dy, const float* ds_in,
                                const float* s, const float* w, const float* mean,
                                const float* rstd, float* dx, void* dr, float* part, float* dw,
                                float* db, int64_t rows, int c, cudaStream_t stream);
int ln_backward_blocks(int64_t rows, int c);
}  // namespace dtrain::cuda

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kMaxWidth = 6144;  // the backward's (dw, db) partials of one warp fit 48 KiB

cudaStream_t stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index());
}

// y's dtype: autocast's on CUDA while it is on (the next GEMM's input), else fp32.
at::ScalarType output_dtype() {
  return compat::autocast_enabled(c10::DeviceType::CUDA)
             ? compat::autocast_dtype(c10::DeviceType::CUDA)
             : at::kFloat;
}

// Runs the forward: s (allocated when r is defined, else x), y, mean, rstd.
struct Forward {
  at::Tensor s, y, mean, rstd;
};
Forward forward_pass(const at::Tensor& x, const at::Tensor& r, const at::Tensor& w,
                     const at::Tensor& b, double eps, at::ScalarType y_type) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Forward f;
  f.s = r.defined() ? at::empty_like(x) : x;
  f.y = at::empty(x.sizes(), x.options().dtype(y_type));
  f.mean = at::empty({rows}, x.options());
  f.rstd = at::empty({rows}, x.options());
  const at::Tensor rc = r.defined() ? r.contiguous() : r;
  DTRAIN_CUDA_CHECK(cuda::layer_norm_forward(
      rc.defined() ? dtype_code(rc.scalar_type()) : 0, dtype_code(y_type), x.data_ptr<float>(),
      rc.defined() ? rc.data_ptr() : nullptr, f.s.data_ptr<float>(), f.y.data_ptr(),
      w.data_ptr<float>(), b.data_ptr<float>(), f.mean.data_ptr<float>(), f.rstd.data_ptr<float>(),
      rows, static_cast<int>(c), static_cast<float>(eps), stream_of(x)));
  return f;
}

// {ds, dr, dw, db}: dr only when r_type is not Undefined; ds_in may be undefined (zero).
variable_list backward_pass(at::Tensor dy, const at::Tensor& ds_in, const variable_list& saved,
                            at::ScalarType r_type, at::ScalarType y_type) {
  const at::Tensor& s = saved[0];
  const at::Tensor& w = saved[1];
  const at::Tensor& mean = saved[2];
  const at::Tensor& rstd = saved[3];
  const int64_t c = s.size(-1), rows = s.numel() / c;
  dy = dy.defined() ? dy.to(y_type).contiguous() : at::zeros(s.sizes(), s.options().dtype(y_type));
  const at::Tensor ds = ds_in.defined() ? ds_in.to(at::kFloat).contiguous() : ds_in;
  at::Tensor dx = at::empty_like(s);
  at::Tensor dr;
  if (r_type != at::ScalarType::Undefined) dr = at::empty(s.sizes(), s.options().dtype(r_type));
  const int blocks = std::max(1, cuda::ln_backward_blocks(rows, static_cast<int>(c)));
  at::Tensor part = at::empty({blocks, 2 * c}, s.options());
  at::Tensor dw = at::empty({c}, s.options()), db = at::empty({c}, s.options());
  DTRAIN_CUDA_CHECK(cuda::layer_norm_backward(
      dr.defined() ? dtype_code(r_type) : 0, dtype_code(y_type), dy.data_ptr(),
      ds.defined() ? ds.data_ptr<float>() : nullptr, s.data_ptr<float>(), w.data_ptr<float>(),
      mean.data_ptr<float>(), rstd.data_ptr<float>(), dx.data_ptr<float>(),
      dr.defined() ? dr.data_ptr() : nullptr, part.data_ptr<float>(), dw.data_ptr<float>(),
      db.data_ptr<float>(), rows, static_cast<int>(c), stream_of(s)));
  return {dx, dr, dw, db};
}

// (x, r, w, b) -> (s = x + r, y = layer_norm(s)).
struct ResidualLayerNorm : public torch::autograd::Function<ResidualLayerNorm> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& r,
                               const at::Tensor& w, const at::Tensor& b, double eps) {
    const at::ScalarType y_type = output_dtype();
    Forward f = forward_pass(x, r, w, b, eps, y_type);
    ctx->save_for_backward({f.s, w, f.mean, f.rstd});
    ctx->saved_data["r"] = static_cast<int64_t>(r.scalar_type());
    ctx->saved_data["y"] = static_cast<int64_t>(y_type);
    return {f.s, f.y};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto r_type = static_cast<at::ScalarType>(ctx->saved_data["r"].toInt());
    const auto y_type = static_cast<at::ScalarType>(ctx->saved_data["y"].toInt());
    variable_list g = backward_pass(grads[1], grads[0], ctx->get_saved_variables(), r_type, y_type);
    return {g[0], g[1], g[2], g[3], at::Tensor()};
  }
};

// (x, w, b) -> y = layer_norm(x).
struct LayerNorm : public torch::autograd::Function<LayerNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, double eps) {
    const at::ScalarType y_type = output_dtype();
    Forward f = forward_pass(x, at::Tensor(), w, b, eps, y_type);
    ctx->save_for_backward({x, w, f.mean, f.rstd});
    ctx->saved_data["y"] = static_cast<int64_t>(y_type);
    return f.y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto y_type = static_cast<at::ScalarType>(ctx->saved_data["y"].toInt());
    variable_list g = backward_pass(grads[0], at::Tensor(), ctx->get_saved_variables(),
                                    at::ScalarType::Undefined, y_type);
    return {g[0], g[2], g[3], at::Tensor()};
  }
};

bool fp32_vector(const at::Tensor& t, const at::Tensor& x, int64_t c) {
  return t.defined() && t.is_cuda() && t.device() == x.device() && t.scalar_type() == at::kFloat &&
         t.dim() == 1 && t.size(0) == c && t.is_contiguous();
}

}  // namespace

bool fused_layer_norm_applies(const at::Tensor& x, const at::Tensor& r, const at::Tensor& weight,
                              const at::Tensor& bias) {
  if (!x.defined() || !x.is_cuda() || x.scalar_type() != at::kFloat || x.dim() < 1 ||
      !x.is_contiguous())
    return false;
  const int64_t c = x.size(-1);
  if (c < 2 || c > kMaxWidth || !fp32_vector(weight, x, c) || !fp32_vector(bias, x, c))
    return false;
  if (!r.defined()) return true;
  const auto rt = r.scalar_type();
  return r.device() == x.device() && r.sizes() == x.sizes() &&
         (rt == at::kFloat || rt == at::kHalf || rt == at::kBFloat16);
}

std::pair<at::Tensor, at::Tensor> fused_residual_layer_norm(const at::Tensor& x,
                                                            const at::Tensor& r,
                                                            const at::Tensor& weight,
                                                            const at::Tensor& bias, double eps) {
  if (!r.defined()) return {x, LayerNorm::apply(x, weight, bias, eps)};
  variable_list out = ResidualLayerNorm::apply(x, r, weight, bias, eps);
  return {out[0], out[1]};
}

}  // namespace dtrain::detail
