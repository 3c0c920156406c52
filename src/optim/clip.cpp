#include "optim/clip.h"

#include "util/torch_compat.h"

namespace dtrain::detail {

at::Tensor gradient_norm(const std::vector<at::Tensor>& params, Communicator* across) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::Tensor squares;
  if (grads.empty()) {
    squares = at::zeros({}, params.empty() ? at::TensorOptions().dtype(at::kFloat)
                                           : params.front().options().dtype(at::kFloat));
  } else {
    squares = at::stack(at::_foreach_norm(grads, 2)).to(at::kFloat).pow(2).sum();
  }
  if (across == nullptr) return squares.sqrt();
  at::Tensor flat = squares.reshape({1});
  across->all_reduce(flat, ReduceOp::kSum);
  return flat.reshape({}).sqrt();
}

void clip_gradients(const std::vector<at::Tensor>& params, double max_norm, Communicator* across) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty() && across == nullptr) return;
  at::Tensor total;
  if (across == nullptr) {
    const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
    total = at::stack(norms).norm(2);
  } else {
    total = gradient_norm(params, across);  // every rank takes part, with gradients or none
  }
  if (grads.empty()) return;
  const at::Tensor coef =
      at::clamp_max(at::full({}, max_norm, total.options()) / (total + 1e-6), 1.0);
  compat::foreach_mul_(grads, coef);
}

}  // namespace dtrain::detail
