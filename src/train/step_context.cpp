#include "train/step_context.h"

namespace dtrain::detail {

void clear_gradients(const StepContext& ctx) {
  for (const auto& p : ctx.params) p.mutable_grad() = at::Tensor();
}

}  // namespace dtrain::detail
