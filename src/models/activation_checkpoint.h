// Activation checkpointing (train.activation_checkpointing): a piece of a model's forward pass
// that keeps only its inputs for backward and runs again inside the backward pass.
//
// Note [activation checkpointing]: checkpointed(fn, inputs) is one autograd node. Its forward
// runs fn with autograd off, so nothing fn computes is kept; the node saves the inputs, the
// autocast state of every device type and, for a fn that draws random numbers, the state of the
// default generator of the inputs' device (the CPU's, or the GPU's). Its backward sets that
// generator state and autocast state again (the current ones are set aside and put back after the
// recompute, so later draws are those of a run without checkpointing), runs fn again with
// autograd on, on detached copies of the inputs that require a gradient, and calls backward from
// fn's outputs with their gradients. That inner backward accumulates the parameters' gradients
// into their grad() through their AccumulateGrad nodes, so the gradient engine's hooks (Reducer)
// fire once per parameter per backward, exactly as without checkpointing; micro-batches
// accumulate as usual; the node returns the inputs' gradients. fn runs the same operations both
// times, so the gradients are those of the uncheckpointed forward (fp32: equal up to the order of
// summation; dropout draws the same masks). Tensors fn updates in place as a side effect (`keep`:
// BatchNorm's running statistics) are copied before the recompute and copied back after its
// backward, so they change once per forward pass, as without checkpointing. A CUDA graph capture
// cannot reset the device generator's offsets, so a fn that draws random numbers is refused while
// a graph is captured (an Error naming train.activation_checkpointing; GraphStep does not try:
// Model::recompute_draws_random_numbers()); one that draws none records no generator state and is
// captured like any other work, its recompute included.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/models.h"

namespace dtrain::detail {

using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

struct CheckpointOptions {
  bool random = false;           // fn draws random numbers (dropout): replay the generators
  std::vector<at::Tensor> keep;  // updated in place by fn: the recompute leaves them as they were
};

// fn(inputs), Note [activation checkpointing]. fn must not modify its inputs in place, must
// return floating-point tensors, and must compute the same thing when called again with the
// same inputs and random state. While autograd does not record (evaluation, no_grad) or no input
// requires a gradient (nothing would reach fn's parameters through the node), fn is simply
// called.
std::vector<at::Tensor> checkpointed(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                     CheckpointOptions options = {});

// Model::set_activation_checkpointing(mode); a model without blocks (model.name `name`) is an
// Error naming train.activation_checkpointing. The session calls it where the model is built (an
// error every rank agrees on), the Trainer again for models built by users' programs.
void set_activation_checkpointing(Model& model, const std::string& name,
                                  ActivationCheckpointing mode);

}  // namespace dtrain::detail
