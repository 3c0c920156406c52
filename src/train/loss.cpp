#include "train/loss.h"

#include <string>

#include "cuda/fused_loss.h"
#include "dtrain/error.h"

namespace dtrain::detail {

at::Tensor compute_loss(LossKind kind, const at::Tensor& out, const at::Tensor& targets, bool sum,
                        bool reuse_outputs) {
  const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
  if (kind == LossKind::kCrossEntropy) {
    if (targets.scalar_type() != at::kLong)
      throw Error("cross_entropy needs class-id targets; this dataset gives " +
                      std::string(at::toString(targets.scalar_type())) + " targets",
                  "train.loss");
    const at::Tensor logits = out.dim() == 3 ? out.reshape({-1, out.size(2)}) : out;  // (N*T, V)
    const at::Tensor labels = out.dim() == 3 ? targets.reshape({-1}) : targets;       // (N*T,)
    if (fused_cross_entropy_applies(logits, labels))
      return fused_cross_entropy(logits, labels, /*mean=*/!sum, reuse_outputs);
    return at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, reduction);
  }
  if (targets.scalar_type() == at::kLong)
    throw Error("mse needs regression targets; this dataset gives class ids (int64 targets): "
                "use train.loss=cross_entropy",
                "train.loss");
  at::Tensor t = targets.to(at::kFloat);
  if (t.dim() == 1) t = t.unsqueeze(1);
  return at::mse_loss(out.to(at::kFloat), t, reduction);
}

void check_loss_fits(LossKind kind, const DataSpec& spec, const std::string& data) {
  if (kind == LossKind::kMse && spec.num_classes > 0)
    throw Error("mse needs regression targets, but the data (" + data + ") is classification with " +
                    std::to_string(spec.num_classes) +
                    " classes (class ids would be broadcast over the logits): use "
                    "train.loss=cross_entropy, or regression data",
                "train.loss");
  if (kind == LossKind::kCrossEntropy && spec.num_classes <= 0)
    throw Error("cross_entropy needs class ids, but the data (" + data + ") is regression" +
                    (spec.target_dim > 0 ? " with " + std::to_string(spec.target_dim) + " target(s)"
                                         : std::string()) +
                    ": use train.loss=mse, or classification data",
                "train.loss");
}

}  // namespace dtrain::detail
