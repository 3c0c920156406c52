// CUDA build: the autograd wrapper of the fused BatchNorm + shortcut + ReLU kernels
// (batch_norm.cu, Note [fused BatchNorm] in fused_batch_norm.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <mutex>
#include <utility>

#include "cuda/batch_norm_args.h"
#include "cuda/check.h"
#include "cuda/dtype_code.h"
#include "cuda/fused_batch_norm.h"
#include "cuda/graph.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kMaxChannels = 16384;
constexpr int kMaxDevices = 64;

cudaStream_t stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index());
}

int multiprocessors(const at::Device& d) {
  return at::cuda::getDeviceProperties(d.index())->multiProcessorCount;
}

// The kernels' ticket counters on `d`: zeros made once per device, outside any graph capture
// (a captured step runs eager warm-up steps first), and left zero by every launch.
unsigned* counters(const at::Tensor& like) {
  static std::mutex mutex;
  static std::array<at::Tensor*, kMaxDevices> made{};  // never freed: kernels may use them to exit
  const int d = like.device().index();
  if (d < 0 || d >= kMaxDevices) throw Error("the fused BatchNorm supports devices 0-63");
  std::lock_guard<std::mutex> lock(mutex);
  if (made[d] == nullptr) {
    if (capturing(like.device())) {
      throw Error(
          "the fused BatchNorm's first use on a device is inside a CUDA graph capture; "
          "run a step before capturing (dtrain's graph step does)");
    }
    made[d] = new at::Tensor(at::zeros({cuda::kBatchNormCounters}, like.options().dtype(at::kInt)));
  }
  return reinterpret_cast<unsigned*>(made[d]->data_ptr<int>());
}

// A gradient as the kernels read it: x's dtype, channels-last; undefined stays undefined.
at::Tensor as_activation(const at::Tensor& grad, const at::Tensor& x) {
  if (!grad.defined()) return grad;
  return grad.to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor workspace(const at::Tensor& x, int sms) {
  return at::empty({cuda::batch_norm_partial_rows(sms), 2, x.size(1)},
                   x.options().dtype(at::kFloat));
}

// (x, weight, bias, residual, running_mean, running_var, num_batches_tracked) -> y, or y and an
// alias of it when forked (fused_batch_norm_forked); residual empty where there is none; the
// exchange (SyncBatchNorm) or null.
struct FusedBatchNorm : public torch::autograd::Function<FusedBatchNorm> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& residual,
                               const at::Tensor& running_mean, const at::Tensor& running_var,
                               const at::Tensor& batches, double eps, double momentum,
                               bool training, bool relu, bool forked, BatchNormExchange* exchange) {
    const int64_t c = x.size(1);
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
    at::Tensor mean = at::empty({c}, f32), invstd = at::empty({c}, f32);
    at::Tensor scale = at::empty({c}, f32), shift = at::empty({c}, f32);
    cuda::BnForwardArgs a;
    a.dtype = dtype_code(x.scalar_type());
    a.x = x.data_ptr();
    const bool with_residual = residual.numel() > 0;
    a.residual = with_residual ? residual.data_ptr() : nullptr;
    a.y = y.data_ptr();
    a.rows = x.numel() / c;
    a.c = static_cast<int>(c);
    a.weight = weight.data_ptr<float>();
    a.bias = bias.data_ptr<float>();
    a.running_mean = running_mean.data_ptr<float>();
    a.running_var = running_var.data_ptr<float>();
    a.batches = batches.data_ptr<int64_t>();
    a.momentum = static_cast<float>(momentum);
    a.eps = static_cast<float>(eps);
    a.training = training;
    a.relu = relu;
    a.mean = mean.data_ptr<float>();
    a.invstd = invstd.data_ptr<float>();
    a.scale = scale.data_ptr<float>();
    a.shift = shift.data_ptr<float>();
    at::Tensor part;
    if (training) {
      a.sms = multiprocessors(x.device());
      part = workspace(x, a.sms);
      a.part = part.data_ptr<float>();
      a.counters = counters(x);
    }
    // Where the backward finds the ReLU's zeros without reading y: recomputed from x where there
    // is no shortcut, else one bit an element written now; y itself where neither can be.
    int mask = cuda::kMaskNone;
    at::Tensor bits;
    if (relu && !with_residual) {
      mask = cuda::kMaskFromX;
    } else if (relu) {
      const int per_byte = cuda::batch_norm_mask_channels(a);
      mask = per_byte > 0 ? cuda::kMaskFromBits : cuda::kMaskFromY;
      if (per_byte > 0) {
        bits = at::empty({a.rows * c / per_byte}, x.options().dtype(at::kByte));
        a.bits = bits.data_ptr<uint8_t>();
      }
    }
    const bool sync = training && exchange != nullptr;
    at::Tensor count;  // SyncBatchNorm: the rows over every rank, for the backward
    if (!sync) {
      DTRAIN_CUDA_CHECK(cuda::batch_norm_forward(a, stream_of(x)));
    } else {
      const auto f64 = x.options().dtype(at::kDouble);
      at::Tensor local = at::empty({2 * c + 1}, f64);
      a.local = local.data_ptr<double>();
      DTRAIN_CUDA_CHECK(cuda::batch_norm_forward(a, stream_of(x)));
      const at::Tensor gathered = exchange->all_gather(local).contiguous();  // (world, 2c + 1)
      count = at::empty({1}, f64);
      a.gathered = gathered.data_ptr<double>();
      a.world = static_cast<int>(gathered.size(0));
      a.count = count.data_ptr<double>();
      DTRAIN_CUDA_CHECK(cuda::batch_norm_forward_finish(a, stream_of(x)));
    }
    ctx->save_for_backward({x, mask == cuda::kMaskFromY ? y : at::Tensor(), weight, mean, invstd,
                            scale, shift, bits, count});
    ctx->saved_data["exchange"] = reinterpret_cast<int64_t>(sync ? exchange : nullptr);
    ctx->saved_data["mask"] = static_cast<int64_t>(mask);
    ctx->saved_data["training"] = training;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = with_residual;
    // Gradients that reach one output only come as undefined tensors, not as zeros to read.
    ctx->set_materialize_grads(false);
    if (!forked) return {y};
    return {y, y.alias()};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& y = saved[1];
    const at::Tensor& weight = saved[2];
    const bool relu = ctx->saved_data["relu"].toBool();
    const bool residual = ctx->saved_data["residual"].toBool();
    // The two uses' gradients of a forked output are read together, not summed first.
    at::Tensor dy = as_activation(grads[0], x);
    at::Tensor dy2 = grads.size() > 1 ? as_activation(grads[1], x) : at::Tensor();
    if (!dy.defined()) std::swap(dy, dy2);
    if (!dy.defined()) return variable_list(13);
    const int64_t c = x.size(1);
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
    // The shortcut's gradient is dy after the ReLU mask: written by the reduction when wanted.
    at::Tensor g = residual ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : at::Tensor();
    at::Tensor dweight = at::empty({c}, f32), dbias = at::empty({c}, f32);
    at::Tensor k = at::empty({3, c}, f32);
    cuda::BnBackwardArgs a;
    a.dtype = dtype_code(x.scalar_type());
    a.dy = dy.data_ptr();
    a.dy2 = dy2.defined() ? dy2.data_ptr() : nullptr;
    a.mask = static_cast<int>(ctx->saved_data["mask"].toInt());
    a.y = a.mask == cuda::kMaskFromY ? y.data_ptr() : nullptr;
    a.scale = saved[5].data_ptr<float>();
    a.shift = saved[6].data_ptr<float>();
    a.bits = saved[7].defined() ? saved[7].data_ptr<uint8_t>() : nullptr;
    a.x = x.data_ptr();
    a.g = g.defined() ? g.data_ptr() : nullptr;
    a.dx = dx.data_ptr();
    a.rows = x.numel() / c;
    a.c = static_cast<int>(c);
    a.weight = weight.data_ptr<float>();
    a.mean = saved[3].data_ptr<float>();
    a.invstd = saved[4].data_ptr<float>();
    a.training = ctx->saved_data["training"].toBool();
    a.relu = relu;
    a.dweight = dweight.data_ptr<float>();
    a.dbias = dbias.data_ptr<float>();
    a.k1 = k[0].data_ptr<float>();
    a.kx = k[1].data_ptr<float>();
    a.kb = k[2].data_ptr<float>();
    a.sms = multiprocessors(x.device());
    const at::Tensor part = workspace(x, a.sms);
    a.part = part.data_ptr<float>();
    a.counters = counters(x);
    auto* exchange = reinterpret_cast<BatchNormExchange*>(ctx->saved_data["exchange"].toInt());
    if (exchange == nullptr) {
      DTRAIN_CUDA_CHECK(cuda::batch_norm_backward(a, stream_of(x)));
    } else {
      at::Tensor local = at::empty({2 * c}, x.options().dtype(at::kDouble));
      a.local = local.data_ptr<double>();
      DTRAIN_CUDA_CHECK(cuda::batch_norm_backward(a, stream_of(x)));
      exchange->all_reduce_sum(local);
      a.count = saved[8].data_ptr<double>();
      DTRAIN_CUDA_CHECK(cuda::batch_norm_backward_finish(a, stream_of(x)));
    }
    return {dx,           dweight,      dbias,        g,
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

bool fp32_vector(const at::Tensor& t, const at::Tensor& x, int64_t c) {
  return t.defined() && t.device() == x.device() && t.scalar_type() == at::kFloat && t.dim() == 1 &&
         t.size(0) == c && t.is_contiguous();
}

}  // namespace

bool fused_batch_norm_applies(const at::Tensor& x, const at::Tensor& residual,
                              const BatchNormState& bn) {
  if (!x.defined() || !x.is_cuda() || x.dim() != 4 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast))
    return false;
  const auto t = x.scalar_type();
  if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16) return false;
  const int64_t c = x.size(1), rows = c > 0 ? x.numel() / c : 0;
  if (c < 1 || c > kMaxChannels || rows < (bn.training ? 2 : 1)) return false;
  if (!fp32_vector(bn.weight, x, c) || !fp32_vector(bn.bias, x, c) ||
      !fp32_vector(bn.running_mean, x, c) || !fp32_vector(bn.running_var, x, c))
    return false;
  if (!bn.num_batches_tracked.defined() || bn.num_batches_tracked.device() != x.device() ||
      bn.num_batches_tracked.scalar_type() != at::kLong || bn.num_batches_tracked.numel() != 1)
    return false;
  if (!residual.defined()) return true;
  return residual.device() == x.device() && residual.scalar_type() == t &&
         residual.sizes() == x.sizes() && residual.is_contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor fused_batch_norm(const at::Tensor& x, const at::Tensor& residual,
                            const BatchNormState& bn, bool relu) {
  if (!fused_batch_norm_applies(x, residual, bn))
    throw Error("the fused BatchNorm does not take these tensors (fused_batch_norm_applies)");
  // Autograd's functions take defined tensors only: no shortcut is an empty one.
  const at::Tensor r = residual.defined() ? residual : at::empty({0}, x.options());
  return FusedBatchNorm::apply(x, bn.weight, bn.bias, r, bn.running_mean, bn.running_var,
                               bn.num_batches_tracked, bn.eps, bn.momentum, bn.training, relu,
                               false, bn.exchange)[0];
}

std::array<at::Tensor, 2> fused_batch_norm_forked(const at::Tensor& x, const at::Tensor& residual,
                                                  const BatchNormState& bn, bool relu) {
  if (!fused_batch_norm_applies(x, residual, bn))
    throw Error("the fused BatchNorm does not take these tensors (fused_batch_norm_applies)");
  const at::Tensor r = residual.defined() ? residual : at::empty({0}, x.options());
  const variable_list y = FusedBatchNorm::apply(x, bn.weight, bn.bias, r, bn.running_mean,
                                                bn.running_var, bn.num_batches_tracked, bn.eps,
                                                bn.momentum, bn.training, relu, true, bn.exchange);
  return {y[0], y[1]};
}

}  // namespace dtrain::detail
