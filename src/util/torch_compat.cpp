#include "util/torch_compat.h"

#include <ATen/autocast_mode.h>

namespace dtrain::compat {

std::string libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

bool autocast_enabled(c10::DeviceType device) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

at::ScalarType autocast_dtype(c10::DeviceType device) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

void foreach_mul_(const std::vector<at::Tensor>& tensors, const at::Tensor& factor) {
#if DTRAIN_TORCH_AT_LEAST(2, 1)
  at::_foreach_mul_(tensors, factor);
#else
  for (const auto& t : tensors) t.mul_(factor);
#endif
}

at::Tensor mm_as_float(const at::Tensor& a, const at::Tensor& b) {
#if DTRAIN_TORCH_AT_LEAST(2, 8)
  if (a.is_cuda() && a.scalar_type() != at::kFloat) return at::mm(a, b, at::kFloat);
#endif
  return at::mm(a, b).to(at::kFloat);
}

void copy_into_flat(const at::Tensor& flat, const std::vector<at::Tensor>& pieces) {
#if DTRAIN_TORCH_AT_LEAST(2, 1)
  std::vector<at::Tensor> slices;
  int64_t at = 0;
  for (const auto& p : pieces) {
    slices.push_back(flat.narrow(0, at, p.numel()));
    at += p.numel();
  }
  at::_foreach_copy_(slices, pieces);
#else
  at::Tensor out = flat;
  at::cat_out(out, pieces, 0);
#endif
}

void copy_from_flat(const at::Tensor& flat, const std::vector<at::Tensor>& pieces) {
  std::vector<at::Tensor> spans;
  int64_t at = 0;
  for (const auto& p : pieces) {
    spans.push_back(flat.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
  copy_each(pieces, spans);
}

void copy_each(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
#if DTRAIN_TORCH_AT_LEAST(2, 1)
  at::_foreach_copy_(dst, src);
#else
  for (size_t i = 0; i < dst.size(); ++i) {
    at::Tensor d = dst[i];
    d.copy_(src[i]);
  }
#endif
}

bool set_sdp_backend(SdpBackend backend) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  auto& ctx = at::globalContext();
  const bool all = backend == SdpBackend::kAll;
  ctx.setSDPUseFlash(all || backend == SdpBackend::kFlash);
  ctx.setSDPUseCuDNN(all || backend == SdpBackend::kCudnn);
  ctx.setSDPUseMemEfficient(all || backend == SdpBackend::kEfficient);
  ctx.setSDPUseMath(true);
  return true;
#else
  return backend == SdpBackend::kAll;
#endif
}

at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, bool is_causal) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, is_causal);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, /*attn_mask=*/{},
                                                       /*dropout_p=*/0.0,
                                                       /*need_attn_weights=*/false, is_causal));
#endif
}

void fused_adam(bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                at::TensorList exp_avg_sqs, at::TensorList steps, const at::Tensor& lr_device,
                double lr, double beta1, double beta2, double weight_decay, double eps) {
#if DTRAIN_TORCH_AT_LEAST(2, 1)
  (void)lr;
  if (adamw) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                      lr_device, beta1, beta2, weight_decay, eps, /*amsgrad=*/false,
                      /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr_device,
                     beta1, beta2, weight_decay, eps, /*amsgrad=*/false,
                     /*maximize=*/false);
  }
#else
  (void)lr_device;
  if (adamw) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr,
                      beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
#else
    TORCH_CHECK(false, "fused AdamW needs LibTorch 2.0");
#endif
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1,
                     beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
#endif
}

void fused_sgd(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
               const at::Tensor& lr_device, double lr, const SgdArgs& a) {
  // With dampening 0 the buffers start as zeros, so momentum * buf + grad equals the first-step
  // rule buf = grad exactly: the caller keeps first_step false and the launch is the same on
  // every step.
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  (void)lr;
  at::_fused_sgd_(params, grads, momentum_buffers, a.weight_decay, a.momentum, lr_device,
                  a.dampening, a.nesterov, /*maximize=*/false, a.first_step);
#elif DTRAIN_TORCH_AT_LEAST(2, 3)
  (void)lr_device;
  at::_fused_sgd_(params, grads, momentum_buffers, a.weight_decay, a.momentum, lr, a.dampening,
                  a.nesterov, /*maximize=*/false, a.first_step);
#else
  (void)params, (void)grads, (void)momentum_buffers, (void)lr_device, (void)lr, (void)a;
  TORCH_CHECK(false, "fused SGD needs LibTorch 2.3");
#endif
}

}  // namespace dtrain::compat
