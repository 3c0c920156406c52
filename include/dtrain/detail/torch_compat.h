// The ONE place that knows the difference between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA).
// Everything else in dtrain calls these wrappers instead of guarding on versions itself.
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <vector>

#define DTRAIN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace dtrain::compat {

// Autocast for one device type. 2.x: per-device set_autocast_enabled / set_autocast_dtype.
// 1.13: set_enabled + set_autocast_gpu_dtype (CUDA), set_cpu_enabled + set_autocast_cpu_dtype.
void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype);
bool autocast_enabled(c10::DeviceType device);
// Whether the scaler ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) have
// CPU kernels. 1.13 has CUDA kernels only.
constexpr bool kHasCpuAmpScalerOps = DTRAIN_TORCH_AT_LEAST(2, 0);

// tensors[i] *= factor (a 0-dim tensor on their device) for every i: one multi-tensor launch
// from 2.1, one launch per tensor before.
void foreach_mul_(const std::vector<at::Tensor>& tensors, const at::Tensor& factor);

// Scaled dot-product attention: public at::scaled_dot_product_attention from 2.0, the private
// tuple-returning one in 1.13. q, k, v: (B, H, T, D).
at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, bool is_causal);

}  // namespace dtrain::compat
