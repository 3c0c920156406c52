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
  for (const auto& t : tensors) t.mul_(factor);
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

}  // namespace dtrain::compat
