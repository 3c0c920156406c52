// Gradient clipping by global norm.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "dtrain/comm.h"

namespace dtrain::detail {

// Scales the gradients so that their global 2-norm is at most max_norm (PyTorch's
// clip_grad_norm_ rule, eps 1e-6), without reading the norm on the host: capturable in a CUDA
// graph. Parameters without a gradient are skipped. With `across` (a sharded step: each rank
// holds its shard of the gradients), the norm is over every rank's gradients: the squares are
// summed over its ranks (a collective), and every rank scales by the same factor.
void clip_gradients(const std::vector<at::Tensor>& params, double max_norm,
                    Communicator* across = nullptr);

// The 2-norm of the gradients (over `across`'s ranks, as above), on the gradients' device; zero
// when there are none.
at::Tensor gradient_norm(const std::vector<at::Tensor>& params, Communicator* across = nullptr);

}  // namespace dtrain::detail
