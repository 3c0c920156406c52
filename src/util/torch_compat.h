// The one place that knows the difference between LibTorch versions (Debian's 1.13 on CPUs, 2.x
// with CUDA): every version test in dtrain is in this header and torch_compat.cpp; everything
// else calls these wrappers or reads these constants (tests/unit/test_tree.cpp checks it).
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <string>
#include <vector>

#define DTRAIN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace dtrain::compat {

// "2.11" (major.minor: Debian's build reports patch 0, so it is never shown or tested).
std::string libtorch_version();

// Autocast for one device type. 2.x: per-device set_autocast_enabled / set_autocast_dtype.
// 1.13: set_enabled + set_autocast_gpu_dtype (CUDA), set_cpu_enabled + set_autocast_cpu_dtype.
void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype);
bool autocast_enabled(c10::DeviceType device);
// The dtype autocast computes in on `device` (meaningful while autocast_enabled(device)).
at::ScalarType autocast_dtype(c10::DeviceType device);
// CPU autocast to fp16 (bf16 exists in every version).
constexpr bool kHasCpuFp16Autocast = DTRAIN_TORCH_AT_LEAST(2, 4);
// Whether the scaler ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) have
// CPU kernels. 1.13 has CUDA kernels only.
constexpr bool kHasCpuAmpScalerOps = DTRAIN_TORCH_AT_LEAST(2, 0);

// tensors[i] *= factor (a 0-dim tensor on their device) for every i: one multi-tensor launch
// from 2.1, one launch per tensor before.
void foreach_mul_(const std::vector<at::Tensor>& tensors, const at::Tensor& factor);

// a · b (2-D, fp16 or bf16) as fp32, for a weight gradient kept in fp32: from 2.8 the GEMM
// writes fp32 itself (at::mm's out_dtype, CUDA only); otherwise, and on CPUs, a cast of the
// product.
at::Tensor mm_as_float(const at::Tensor& a, const at::Tensor& b);
constexpr bool kHasMmOutDtype = DTRAIN_TORCH_AT_LEAST(2, 8);

// The 1-D tensors `pieces` (one dtype, flat's) copied one after another into `flat` (exactly
// their total length): one multi-tensor launch from 2.1 (_foreach_copy_), one concatenation before.
void copy_into_flat(const at::Tensor& flat, const std::vector<at::Tensor>& pieces);
// The other way: `flat`'s spans, one after another (exactly the pieces' total length), copied
// into `pieces` (one dtype, flat's; any layout: each span holds its piece in logical order). One
// multi-tensor launch from 2.1 (_foreach_copy_), a copy per piece before.
void copy_from_flat(const at::Tensor& flat, const std::vector<at::Tensor>& pieces);
// dst[i].copy_(src[i]) for each i, converting the dtype: one multi-tensor launch from 2.1
// (_foreach_copy_) where each src has src[0]'s dtype, each dst dst[0]'s, and each pair the same
// sizes and strides; otherwise (and before 2.1) a copy per tensor.
void copy_each(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src);

// Scaled dot-product attention: public at::scaled_dot_product_attention from 2.0, the private
// tuple-returning one in 1.13. q, k, v: (B, H, T, D).
at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, bool is_causal);

// Restricts CUDA's scaled-dot-product attention to one backend (flash, cudnn, efficient) with
// math as the fallback, or back to all of them (auto); process-wide (at::globalContext()'s
// SDP flags, whose cuDNN flag exists from 2.4). False when this LibTorch cannot: nothing changed.
enum class SdpBackend { kAll, kFlash, kCudnn, kEfficient, kMath };
bool set_sdp_backend(SdpBackend backend);

// CUDA graph capture with a capture mode (at::cuda::CUDAGraph::capture_begin(pool, mode)).
constexpr bool kHasCudaGraphs = DTRAIN_TORCH_AT_LEAST(2, 0);
constexpr const char* kCudaGraphsSince = "2.0";

// ---- fused optimizer kernels (aten/src/ATen/native/native_functions.yaml) --------------------
//   _fused_adam_(Tensor[] self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, Tensor[]
//   state_steps,
//       *, float lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad,
//       bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None)           since 1.13 (CUDA)
//   _fused_adamw_(... same ...)                                                   since 2.0
//   _fused_adam_.tensor_lr / _fused_adamw_.tensor_lr (... *, Tensor lr, ...)      since 2.1
//   _fused_sgd_(Tensor[] self, grads, momentum_buffer_list, *, float weight_decay, float momentum,
//       float lr, float dampening, bool nesterov, bool maximize, bool is_first_step,
//       Tensor? grad_scale=None, Tensor? found_inf=None)                          since 2.3
//   _fused_sgd_.tensor_lr (... Tensor lr ...): guarded from 2.4 (present in every 2.4+ release).
// The kernels read step counts and a tensor lr as fp32 on the parameters' device; the caller
// increments the step counts before the call (as torch.optim does).
constexpr bool kHasFusedAdam = DTRAIN_TORCH_AT_LEAST(1, 13);
constexpr bool kHasFusedAdamW = DTRAIN_TORCH_AT_LEAST(2, 0);
constexpr bool kHasFusedSgd = DTRAIN_TORCH_AT_LEAST(2, 3);
constexpr bool kFusedAdamTakesTensorLr = DTRAIN_TORCH_AT_LEAST(2, 1);
constexpr bool kFusedSgdTakesTensorLr = DTRAIN_TORCH_AT_LEAST(2, 4);

// One fused Adam or AdamW launch; lr_device is used when the overload exists, else lr.
void fused_adam(bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                at::TensorList exp_avg_sqs, at::TensorList steps, const at::Tensor& lr_device,
                double lr, double beta1, double beta2, double weight_decay, double eps);
// One fused SGD launch. momentum_buffers is empty when momentum is 0; first_step: the buffers are
// set to the gradients (torch's first step) rather than updated with dampening.
struct SgdArgs {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;
};
void fused_sgd(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
               const at::Tensor& lr_device, double lr, const SgdArgs& args);

}  // namespace dtrain::compat
