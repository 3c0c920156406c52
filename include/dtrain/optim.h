// dtrain::Optimizer: SGD, Adam or AdamW over a fixed list of parameters, updating all of them
// with multi-tensor kernels: LibTorch's fused CUDA kernels where this LibTorch has them and every
// parameter is an fp32 CUDA tensor on one device, multi-tensor (foreach) ops everywhere else.
// Invariants:
//   - one step() equals one torch.optim step (SGD with momentum, dampening and Nesterov; Adam
//     with L2 weight decay added to the gradient; AdamW with decoupled decay; amsgrad off),
//     parameter by parameter; a parameter whose .grad() is undefined is skipped and its state left
//     as it was; with no_decay_norm_bias every parameter of fewer than 2 dimensions is in a
//     second param group whose weight_decay is 0, as nanoGPT and timm build their groups;
//   - all state (moments, momentum buffers, step counters, the device learning rate) is allocated
//     in the constructor, so step() allocates no state and always works on the same tensors: once
//     every parameter has a gradient, a capturable() step can be captured in a CUDA graph and
//     replayed (set_lr() before a replay changes the learning rate it uses);
//   - step() never writes to the gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config.h"

namespace dtrain {

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  // Values outside the schema's ranges (train.momentum, ...) throw the config's Error.
  double momentum = 0;      // SGD only
  double dampening = 0;     // SGD with momentum: buf = momentum * buf + (1 - dampening) * grad
  bool nesterov = false;    // SGD: Nesterov momentum (momentum > 0, dampening 0, as torch's)
  double weight_decay = 0;  // SGD, Adam: L2 added to the gradient; AdamW: p *= 1 - lr * wd
  // No weight decay for parameters of fewer than 2 dimensions (biases, norm weights, scalars).
  bool no_decay_norm_bias = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  // Allow the fused CUDA kernels (LibTorch 2.x, CUDA, all parameters fp32 on one device); when
  // they cannot be used, describe() says why and step() uses foreach ops.
  bool fused = true;
};

class Optimizer {
 public:
  // params: the tensors to update in place (leaf parameters; their .grad() is read at each step).
  // numbers: the number state() gives each parameter's entries (the <i> of "exp_avg.<i>"), one per
  // parameter, all different; empty: 0, 1, 2, ... An optimizer over a shard of a model's
  // parameters (dist.shard_optimizer: flat pieces of them) numbers its pieces as the shard plan
  // does, so that the shards' states can be put together into one optimizer's over all of them.
  // decays: per parameter, whether weight decay applies; empty: by no_decay_norm_bias on each
  // parameter's dimensions (a piece takes its whole parameter's rule).
  Optimizer(std::vector<at::Tensor> params, OptimizerOptions options,
            std::vector<size_t> numbers = {}, std::vector<bool> decays = {});
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // One update of every parameter that has a gradient, with learning rate lr.
  void step(double lr);
  // Makes lr the learning rate of the next step, or of the next replay of a captured step. The
  // device copy is refreshed (one fill kernel) only when the value changes; step() calls it. To
  // capture: set_lr(lr), then step(lr) inside the capture (it then captures only the update);
  // before each replay: set_lr(new lr).
  void set_lr(double lr);

  // What runs, e.g. "AdamW, fused CUDA kernel" or "SGD (momentum 0.9), multi-tensor (foreach)",
  // and why the fused kernel is not used when it was allowed but cannot be.
  std::string describe() const;
  bool fused() const { return fused_; }
  // Whether step() launches only device work whose host-side arguments never change between
  // steps (the learning rate is read from a device tensor): true for the fused CUDA paths whose
  // LibTorch takes the learning rate as a tensor. Such a step can be captured in a CUDA graph
  // once every parameter has a gradient and one step has run uncaptured.
  bool capturable() const { return capturable_; }
  const OptimizerOptions& options() const { return options_; }
  size_t num_params() const { return params_.size(); }
  // Bytes of state this optimizer holds (moments, momentum buffers, device step counts).
  int64_t state_bytes() const;

  // The state by name, for checkpoints: "momentum.<i>" (SGD with momentum), "exp_avg.<i>",
  // "exp_avg_sq.<i>", "step.<i>" (Adam, AdamW, and SGD with dampening, whose first step differs
  // from the others; 0-dim float), i = the parameter's number (its index, unless the constructor
  // was given numbers). Moments and
  // buffers are the live tensors (save them before the next step); step counts kept on the host
  // come as new CPU tensors.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  // Restores what state() returned, copying values into this optimizer's own tensors (any
  // device). Throws dtrain::Error naming the entry that is missing, unexpected, or of the wrong
  // shape; on error nothing has been changed.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);

 private:
  // One param group (parameters by index, all with the same weight decay).
  void step_fused(const std::vector<size_t>& group, double weight_decay);
  void step_foreach(const std::vector<size_t>& group, double lr, double weight_decay);
  void sgd_foreach(const std::vector<size_t>& group, double lr, double weight_decay);

  OptimizerKind kind_;
  OptimizerOptions options_;
  std::vector<at::Tensor> params_;
  std::vector<size_t> numbers_;  // per parameter: the <i> of its state entries
  bool fused_ = false;
  bool capturable_ = false;
  std::string not_fused_reason_;  // set when options_.fused but the fused kernel cannot be used

  std::vector<at::Tensor> momentum_;    // SGD with momentum: zeros like each parameter
  std::vector<at::Tensor> exp_avg_;     // Adam(W): first moment
  std::vector<at::Tensor> exp_avg_sq_;  // Adam(W): second moment
  std::vector<bool> decays_;            // per parameter: whether weight decay applies
  std::vector<at::Tensor> steps_;       // Adam(W), fused: 0-dim fp32 step counts on the device
  std::vector<int64_t> host_steps_;     // Adam(W), foreach; SGD with dampening: step counts
  at::Tensor lr_device_;                // fused with a tensor learning rate: 0-dim fp32
  double lr_ = -1;                      // last learning rate given (-1: none yet)
};

}  // namespace dtrain
