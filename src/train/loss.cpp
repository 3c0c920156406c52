#include "train/loss.h"

#include <string>

#include "cuda/fused_loss.h"
#include "dtrain/error.h"

namespace dtrain::detail {

at::Tensor compute_loss(LossKind kind, const at::Tensor& out, const at::Tensor& targets, bool sum) {
  const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
  if (kind == LossKind::kCrossEntropy) {
    if (targets.scalar_type() != at::kLong)
      throw Error("cross_entropy needs class-id targets; this dataset gives " +
                      std::string(at::toString(targets.scalar_type())) + " targets",
                  "train.loss");
    const at::Tensor logits = out.dim() == 3 ? out.reshape({-1, out.size(2)}) : out;  // (N*T, V)
    const at::Tensor labels = out.dim() == 3 ? targets.reshape({-1}) : targets;       // (N*T,)
    if (fused_cross_entropy_applies(logits, labels))
      return fused_cross_entropy(logits, labels, /*mean=*/!sum);
    return at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, reduction);
  }
  at::Tensor t = targets.to(at::kFloat);
  if (t.dim() == 1) t = t.unsqueeze(1);
  return at::mse_loss(out.to(at::kFloat), t, reduction);
}

}  // namespace dtrain::detail
