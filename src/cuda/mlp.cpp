// CUDA build: GPT's MLP with the forward GELU inside the c_fc GEMM's epilogue (Note [MLP GEMM
// epilogues] in fused_mlp.h).
#include <torch/csrc/autograd/custom_function.h>

#include "cuda/blas_lt.h"
#include "cuda/fused_linear.h"
#include "cuda/fused_mlp.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType type_of(const c10::IValue& v) { return static_cast<at::ScalarType>(v.toInt()); }

struct Mlp : public torch::autograd::Function<Mlp> {
  // x (..., C); fc_w (H, C), fc_b (H,); proj_w (C, H), proj_b (C,).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& fc_w,
                            const at::Tensor& fc_b, const at::Tensor& proj_w,
                            const at::Tensor& proj_b) {
    const at::ScalarType dt = compat::autocast_dtype(c10::DeviceType::CUDA);
    const int64_t c = fc_w.size(1), hidden = fc_w.size(0);
    const at::Tensor xc = x.to(dt).reshape({-1, c}).contiguous();  // (N, C)
    const at::Tensor fw = fc_w.to(dt).contiguous(), pw = proj_w.to(dt).contiguous();
    const at::Tensor fb = fc_b.to(dt).contiguous();
    at::Tensor h = at::empty({xc.size(0), hidden}, xc.options());  // gelu(pre)
    at::Tensor pre = at::empty_like(h);                            // xc · fwᵀ + fb
    gemm_gelu_aux_bias(xc, fw, fb, h, pre);
    at::Tensor y = at::linear(h, pw, proj_b.to(dt));  // (N, C)
    ctx->save_for_backward({xc, fw, pw, pre, h});
    ctx->saved_data["x"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["fc_w"] = static_cast<int64_t>(fc_w.scalar_type());
    ctx->saved_data["fc_b"] = static_cast<int64_t>(fc_b.scalar_type());
    ctx->saved_data["proj_w"] = static_cast<int64_t>(proj_w.scalar_type());
    ctx->saved_data["proj_b"] = static_cast<int64_t>(proj_b.scalar_type());
    std::vector<int64_t> shape = x.sizes().vec();
    ctx->saved_data["shape"] = shape;
    return y.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &xc = saved[0], &fw = saved[1], &pw = saved[2], &pre = saved[3], &h = saved[4];
    const int64_t c = fw.size(1);
    const at::Tensor dy = grads[0].to(xc.scalar_type()).reshape({-1, c}).contiguous();  // (N, C)
    const at::Tensor d_proj_b = column_sums(dy).to(type_of(ctx->saved_data["proj_b"]));
    const at::Tensor d_proj_w = weight_gradient(dy.t(), h, type_of(ctx->saved_data["proj_w"]));
    // Backward without an epilogue: Note [MLP GEMM epilogues].
    const at::Tensor d_pre = at::gelu_backward(at::mm(dy, pw), pre, "tanh");
    const at::Tensor d_fc_b = column_sums(d_pre);
    const at::Tensor d_fc_w = weight_gradient(d_pre.t(), xc, type_of(ctx->saved_data["fc_w"]));
    const at::Tensor dx = at::mm(d_pre, fw)
                              .view(ctx->saved_data["shape"].toIntVector())
                              .to(type_of(ctx->saved_data["x"]));
    return {dx, d_fc_w, d_fc_b.to(type_of(ctx->saved_data["fc_b"])), d_proj_w, d_proj_b};
  }
};

bool floating(const at::Tensor& t) {
  const auto s = t.scalar_type();
  return s == at::kFloat || s == at::kHalf || s == at::kBFloat16;
}

}  // namespace

bool fused_mlp_applies(const at::Tensor& x, const at::Tensor& fc_w, const at::Tensor& fc_b,
                       const at::Tensor& proj_w, const at::Tensor& proj_b) {
  if (!x.defined() || !fc_w.defined() || !fc_b.defined() || !proj_w.defined() ||
      !proj_b.defined() || !x.is_cuda() || x.dim() < 2 || x.numel() == 0 ||
      !compat::autocast_enabled(c10::DeviceType::CUDA))
    return false;
  const int64_t c = x.size(-1);
  if (fc_w.dim() != 2 || proj_w.dim() != 2 || fc_b.dim() != 1 || proj_b.dim() != 1) return false;
  const int64_t hidden = fc_w.size(0);
  if (fc_w.size(1) != c || proj_w.size(0) != c || proj_w.size(1) != hidden ||
      fc_b.size(0) != hidden || proj_b.size(0) != c)
    return false;
  for (const at::Tensor* t : {&x, &fc_w, &fc_b, &proj_w, &proj_b})
    if (t->device() != x.device() || !floating(*t)) return false;
  return gemm_gelu_fits(compat::autocast_dtype(c10::DeviceType::CUDA), c, hidden);
}

at::Tensor fused_mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                     const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  return Mlp::apply(x, fc_weight, fc_bias, proj_weight, proj_bias);
}

}  // namespace dtrain::detail
