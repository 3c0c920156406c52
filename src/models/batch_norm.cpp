// BatchNorm in dtrain's image models: the fused op, LibTorch's module, or statistics over every
// rank (models/batch_norm.h).
#include "models/batch_norm.h"

#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

BatchNormState state_of(const torch::nn::BatchNorm2d& bn, BatchNormSync* sync) {
  BatchNormState s{bn->weight,
                   bn->bias,
                   bn->running_mean,
                   bn->running_var,
                   bn->num_batches_tracked,
                   bn->options.eps(),
                   bn->options.momentum().value_or(0.1),
                   bn->is_training()};
  s.exchange = sync;
  return s;
}

// A (C,) vector shaped to broadcast over x (N, C, ...).
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

// Every dimension of x but the channels'.
std::vector<int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// (x, weight, bias, running_mean, running_var, num_batches_tracked) -> y.
struct SyncBatchNorm : public torch::autograd::Function<SyncBatchNorm> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& running_mean,
                               const at::Tensor& running_var, const at::Tensor& batches, double eps,
                               double momentum, BatchNormExchange* exchange) {
    const int64_t c = x.size(1);
    const auto dims = reduced_dims(x);
    const at::Tensor xf = x.to(at::kFloat);
    const double rows = c > 0 ? static_cast<double>(x.numel() / c) : 0;
    // This rank's mean and sum of squared deviations, in double, two passes.
    at::Tensor mean = rows > 0 ? xf.sum(dims, false, at::kDouble).div_(rows)
                               : at::zeros({c}, x.options().dtype(at::kDouble));
    const at::Tensor xmu_local = xf - per_channel(mean.to(at::kFloat), x);
    at::Tensor m2 = xmu_local.mul(xmu_local).sum(dims, false, at::kDouble);
    const at::Tensor local = at::cat({mean, m2, at::full({1}, rows, mean.options())});
    const at::Tensor all = exchange->all_gather(local).contiguous();  // (world, 2c + 1)
    // Merged in rank order (Chan): n = sum n_r, mean = sum n_r mean_r / n,
    // m2 = sum (m2_r + n_r (mean_r - mean)^2).
    const at::Tensor n_r = all.select(1, 2 * c).unsqueeze(1);  // (world, 1)
    const at::Tensor means = all.narrow(1, 0, c), m2s = all.narrow(1, c, c);
    const at::Tensor n = n_r.sum();
    mean = (means * n_r).sum(0).div_(n);
    const at::Tensor d = means - mean;
    m2 = (m2s + n_r * d * d).sum(0);
    const at::Tensor invstd = (m2 / n + eps).rsqrt();
    {
      at::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(at::kFloat), momentum);
      running_var.mul_(1 - momentum).add_((m2 / (n - 1)).to(at::kFloat), momentum);
      batches.add_(1);
    }
    const at::Tensor meanf = mean.to(at::kFloat), invstdf = invstd.to(at::kFloat);
    const at::Tensor scale = weight.to(at::kFloat) * invstdf;
    const at::Tensor y =
        ((xf - per_channel(meanf, x)) * per_channel(scale, x) + per_channel(bias.to(at::kFloat), x))
            .to(x.scalar_type())
            .contiguous(x.suggest_memory_format());
    ctx->save_for_backward({x, weight, meanf, invstdf, n});
    ctx->saved_data["exchange"] = reinterpret_cast<int64_t>(exchange);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const at::Tensor& n = saved[4];  // rows over every rank (a device scalar: no host sync)
    auto* exchange = reinterpret_cast<BatchNormExchange*>(ctx->saved_data["exchange"].toInt());
    const int64_t c = x.size(1);
    const auto dims = reduced_dims(x);
    const at::Tensor dy = grads[0].to(at::kFloat);
    const at::Tensor xmu = x.to(at::kFloat) - per_channel(mean, x);
    const at::Tensor sum_dy = dy.sum(dims, false, at::kDouble);
    const at::Tensor sum_dy_xmu = (dy * xmu).sum(dims, false, at::kDouble);
    const at::Tensor dweight = (sum_dy_xmu * invstd).to(at::kFloat);
    const at::Tensor dbias = sum_dy.to(at::kFloat);
    at::Tensor sums = at::cat({sum_dy, sum_dy_xmu});
    exchange->all_reduce_sum(sums);
    const at::Tensor mean_dy = sums.narrow(0, 0, c).div(n).to(at::kFloat);
    const at::Tensor mean_dy_xmu = sums.narrow(0, c, c).div(n).to(at::kFloat);
    const at::Tensor dx =
        ((dy - per_channel(mean_dy, x) - xmu * per_channel(invstd * invstd * mean_dy_xmu, x)) *
         per_channel(invstd * weight.to(at::kFloat), x))
            .to(x.scalar_type())
            .contiguous(x.suggest_memory_format());
    return {dx,           dweight.to(weight.scalar_type()),
            dbias,        at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor sync_batch_norm(const at::Tensor& x, const BatchNormState& bn,
                           BatchNormExchange& exchange) {
  return SyncBatchNorm::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                              bn.num_batches_tracked, bn.eps, bn.momentum, &exchange)[0];
}

at::Tensor norm(torch::nn::BatchNorm2d bn, const at::Tensor& x, const at::Tensor& residual,
                bool relu, const NormMode& mode) {
  const bool sync = mode.sync != nullptr && bn->is_training();
  if (mode.fused && bn->options.momentum().has_value()) {
    const BatchNormState s = state_of(bn, sync ? mode.sync : nullptr);
    if (fused_batch_norm_applies(x, residual, s)) return fused_batch_norm(x, residual, s, relu);
  }
  at::Tensor y = sync ? sync_batch_norm(x, state_of(bn, mode.sync), *mode.sync) : bn->forward(x);
  if (residual.defined()) y.add_(residual);
  return relu ? y.relu_() : y;
}

std::array<at::Tensor, 2> norm_forked(torch::nn::BatchNorm2d bn, const at::Tensor& x,
                                      const at::Tensor& residual, bool relu, const NormMode& mode) {
  if (mode.fused && bn->options.momentum().has_value()) {
    const bool sync = mode.sync != nullptr && bn->is_training();
    const BatchNormState s = state_of(bn, sync ? mode.sync : nullptr);
    if (fused_batch_norm_applies(x, residual, s))
      return fused_batch_norm_forked(x, residual, s, relu);
  }
  const at::Tensor y = norm(bn, x, residual, relu, mode);
  return {y, y};
}

}  // namespace dtrain::detail
