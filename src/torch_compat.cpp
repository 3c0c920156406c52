#include "dtrain/detail/torch_compat.h"

#include <ATen/autocast_mode.h>

namespace dtrain::compat {

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

void foreach_mul_(const std::vector<at::Tensor>& tensors, const at::Tensor& factor) {
#if DTRAIN_TORCH_AT_LEAST(2, 1)
  at::_foreach_mul_(tensors, factor);
#else
  for (const auto& t : tensors) const_cast<at::Tensor&>(t).mul_(factor);
#endif
}

at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, bool is_causal) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          is_causal);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, /*attn_mask=*/{},
                                                        /*dropout_p=*/0.0,
                                                        /*need_attn_weights=*/false, is_causal));
#endif
}

void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs,
                      const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& steps, double lr, double beta1, double beta2,
                      double weight_decay, double eps) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  at::_foreach_add_(steps, 1);  // one launch for every step counter, as torch.optim does first
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1,
                    beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr,
      (void)beta1, (void)beta2, (void)weight_decay, (void)eps;
  TORCH_CHECK(false, "fused AdamW needs LibTorch 2.x");
#endif
}

}  // namespace dtrain::compat
