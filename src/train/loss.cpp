#include "train/loss.h"

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>

#include "cuda/fused_loss.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "train/start_up_memory.h"
#include "train/step_context.h"
#include "util/format.h"

namespace dtrain::detail {

at::Tensor compute_loss(LossKind kind, const at::Tensor& out, const at::Tensor& targets, bool sum,
                        bool reuse_outputs, double label_smoothing) {
  const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
  if (kind == LossKind::kCrossEntropy) {
    const bool soft = targets.is_floating_point() && targets.sizes() == out.sizes();
    if (targets.scalar_type() != at::kLong && !soft)
      throw Error("cross_entropy needs class-id targets; this dataset gives " +
                      std::string(at::toString(targets.scalar_type())) + " targets",
                  "train.loss");
    if (soft)
      return at::cross_entropy_loss(out.to(at::kFloat), targets.to(at::kFloat), {}, reduction, -100,
                                    label_smoothing);
    const at::Tensor logits = out.dim() == 3 ? out.reshape({-1, out.size(2)}) : out;  // (N*T, V)
    const at::Tensor labels = out.dim() == 3 ? targets.reshape({-1}) : targets;       // (N*T,)
    if (fused_cross_entropy_applies(logits, labels))
      return fused_cross_entropy(logits, labels, /*mean=*/!sum, reuse_outputs, label_smoothing);
    return at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, reduction, -100,
                                  label_smoothing);
  }
  if (targets.scalar_type() == at::kLong)
    throw Error(
        "mse needs regression targets; this dataset gives class ids (int64 targets): "
        "use train.loss=cross_entropy",
        "train.loss");
  at::Tensor t = targets.to(at::kFloat);
  if (t.dim() == 1) t = t.unsqueeze(1);
  return at::mse_loss(out.to(at::kFloat), t, reduction);
}

at::Tensor training_loss(LossKind kind, Model& model, const at::Tensor& inputs,
                         const at::Tensor& targets, double label_smoothing) {
  if (kind == LossKind::kCrossEntropy && targets.scalar_type() == at::kLong) {
    at::Tensor loss = model.forward_cross_entropy(inputs, targets, label_smoothing);
    if (loss.defined()) return loss;
  }
  return compute_loss(kind, model.forward(inputs), targets, /*sum=*/false,
                      model.loss_can_reuse_outputs(), label_smoothing);
}

void check_loss_fits(LossKind kind, const DataSpec& spec, const std::string& data) {
  if (kind == LossKind::kMse && spec.num_classes > 0)
    throw Error("mse needs regression targets, but the data (" + data +
                    ") is classification with " + std::to_string(spec.num_classes) +
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

void check_outputs_fit(const DataSpec& spec, const at::Tensor& out, const at::Tensor& targets,
                       const std::string& model, const std::string& data) {
  const std::vector<int64_t> got = out.sizes().vec(), want = targets.sizes().vec();
  const std::string shapes =
      "outputs of shape " + shape_str(got) + " for targets of shape " + shape_str(want);
  if (spec.num_classes > 0) {
    const bool fits =
        got.size() == want.size() + 1 && std::equal(want.begin(), want.end(), got.begin());
    if (!fits)
      throw Error("model '" + model + "' gives " + shapes + " (one training sample of " + data +
                      "); class ids need one score per class in the last dimension",
                  "model.name");
    if (got.back() < spec.num_classes)
      throw Error("model '" + model + "' scores " + std::to_string(got.back()) + " classes (" +
                      shapes + "), but the data (" + data + ") has " +
                      std::to_string(spec.num_classes) + " classes, class ids 0.." +
                      std::to_string(spec.num_classes - 1) +
                      ": a class id the model has no output for would give a NaN loss; build the "
                      "model with " +
                      std::to_string(spec.num_classes) +
                      " outputs (DataSpec::num_classes) or set data.num_classes",
                  "model.name");
    return;
  }
  std::vector<int64_t> rows = want;
  if (rows.size() == 1) rows.push_back(1);  // (N,) targets are read as (N, 1) (compute_loss)
  if (got != rows)
    throw Error("model '" + model + "' gives " + shapes + " (one training sample of " + data +
                    ", " + std::to_string(spec.target_dim) +
                    " regression target(s)); they must be equal, as mse "
                    "would broadcast one over the other",
                "model.name");
}

void check_data_fits(StepContext& ctx, LossKind kind, const Dataset& train, Communicator& control) {
  ctx.watchdog->beat("output check");
  Batch one;
  agree_no_failure(control, [&] {
    check_loss_fits(kind, train.spec(), train.describe());
    if (train.size() > 0) one = train.get({0});
  });
  if (train.size() == 0) return;
  Model& model = *ctx.model;
  const bool was_training = model.is_training();
  model.eval();
  at::Tensor out;
  StartUpMemory memory(ctx);  // out of memory: one line (Note [memory ladder])
  memory.run(FaultInjector::StartUp::kOutputCheck, [&] {
    at::NoGradGuard no_grad;
    out = model.forward(ctx.pixels(one.inputs.to(ctx.device)));
  });
  model.train(was_training);
  memory.agree();
  agree_no_failure(control, [&] {
    check_outputs_fit(train.spec(), out, one.targets, model.name(), train.describe());
  });
}

}  // namespace dtrain::detail
