// Mixed precision: an autocast guard for forward + loss, and a gradient scaler (dynamic loss
// scaling for fp16) with PyTorch's algorithm and defaults. train.skip_nonfinite uses the same
// scaler at a fixed scale of 1, for its check of the gradients.
// Invariants: master weights and optimizer state stay fp32; gradients are unscaled exactly once
// per step, after the all-reduce and before clipping; a step with any non-finite gradient is
// skipped, and since every rank holds the same averaged gradients, every rank skips it alike.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "dtrain/config.h"

namespace dtrain {

class Communicator;  // dtrain/comm.h

// Enables autocast at `precision` for `device` in its scope (nests; restores the previous
// state); does nothing where autocast_supported() is false (fp32 among them).
class AutocastGuard {
 public:
  AutocastGuard(const at::Device& device, Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  bool active() const { return active_; }

 private:
  c10::DeviceType type_;
  bool active_ = false;
  bool prev_enabled_ = false;
};

// Whether autocast to `precision` is available on this device with this LibTorch (fp32: false).
bool autocast_supported(const at::Device& device, Precision precision);
// Why autocast to `precision` on `device` is slower than fp32 here, or "": bf16 on a CPU without
// bf16 instructions (AVX512-BF16 or AMX-BF16), where every bf16 operation is converted in software
// (ResNet on such a CPU: about 6x slower than fp32).
std::string autocast_slowdown(const at::Device& device, Precision precision);

struct ScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  GradScaler(const at::Device& device, ScalerOptions options = {});
  at::Tensor scale(const at::Tensor& loss) const { return loss * scale_; }
  // Multiply the gradients by 1/scale; records whether any is inf or NaN. Once per step. With
  // `across` (a sharded step: each rank holds its shard of the gradients), the record is the
  // maximum over its ranks (a collective), so that every rank skips or steps alike.
  void unscale(const std::vector<at::Tensor>& params, Communicator* across = nullptr);
  // After unscale(): true when the optimizer step must be skipped.
  bool found_inf() const;
  // Grow or back off the scale for the next step (PyTorch's update rule).
  void update();
  double current_scale() const;
  int64_t growth_tracker() const;
  // The state by name, for checkpoints: "scale" (float, 1 element) and "growth_tracker" (int32),
  // new CPU tensors. load_state() copies them back (an Error names an entry that is unexpected,
  // missing or not one value; nothing is changed then).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);

 private:
  at::Tensor scale_;           // float, on the device
  at::Tensor growth_tracker_;  // int32, on the device
  at::Tensor found_inf_;       // float, on the device
  ScalerOptions options_;
};

}  // namespace dtrain
