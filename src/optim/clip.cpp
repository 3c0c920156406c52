#include "optim/clip.h"

#include "util/torch_compat.h"

namespace dtrain::detail {

void clip_gradients(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  const at::Tensor total = at::stack(norms).norm(2);
  const at::Tensor coef = at::clamp_max(at::full({}, max_norm, total.options()) / (total + 1e-6), 1.0);
  compat::foreach_mul_(grads, coef);
}

}  // namespace dtrain::detail
