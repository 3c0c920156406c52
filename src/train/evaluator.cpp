#include "train/evaluator.h"

#include <ATen/core/grad_mode.h>

#include "dtrain/data/sampler.h"
#include "train/loss.h"
#include "train/weight_average.h"

namespace dtrain::detail {

EvalResult evaluate(const StepContext& ctx, const std::shared_ptr<const Dataset>& test,
                    int64_t batch, const LoaderOptions& loader_options) {
  ctx.watchdog->beat("evaluation");
  EvalResult r;
  if (!test) return r;
  Communicator& control = *ctx.control;
  std::vector<int64_t> mine = eval_shard(test->size(), control.world(), control.rank());
  const int64_t bs = std::max<int64_t>(1, batch);
  std::vector<std::vector<int64_t>> plan;
  for (size_t b = 0; b < mine.size(); b += static_cast<size_t>(bs))
    plan.emplace_back(mine.begin() + b, mine.begin() + std::min(mine.size(), b + bs));
  Loader loader(test, std::move(plan), loader_options);
  ctx.model->eval();
  at::NoGradGuard no_grad;
  const auto on_device = at::TensorOptions().device(ctx.device);
  at::Tensor loss_sum = at::zeros({}, on_device.dtype(at::kDouble));
  at::Tensor correct = at::zeros({}, on_device.dtype(at::kLong));
  at::Tensor in_top5 = at::zeros({}, on_device.dtype(at::kLong));
  const DataSpec spec = test->spec();
  const bool classify = spec.num_classes > 0;
  const bool top5 = classify && spec.num_classes > 5;
  double predictions = 0;  // class predictions scored: samples, or tokens of sequence models
  while (auto b = loader.next()) {
    ctx.watchdog->beat("evaluation");
    at::Tensor out = ctx.model->forward(ctx.pixels(b->inputs));
    loss_sum += compute_loss(ctx.loss, out, b->targets, /*sum=*/true).to(at::kDouble);
    if (classify) {
      // (N, C) logits score N samples; (N, T, V) logits of a sequence model score N * T tokens.
      correct += out.argmax(-1).eq(b->targets).sum();
      if (top5) in_top5 += std::get<1>(out.topk(5, -1)).eq(b->targets.unsqueeze(-1)).any(-1).sum();
      predictions += static_cast<double>(b->targets.numel());
    }
  }
  ctx.model->train();
  // Sum (loss, correct, count, predictions, in the top 5) over ranks; every sample was evaluated
  // by exactly one rank.
  at::Tensor totals =
      at::stack({loss_sum.cpu(), correct.cpu().to(at::kDouble),
                 at::scalar_tensor(static_cast<double>(mine.size()), at::kDouble),
                 at::scalar_tensor(predictions, at::kDouble), in_top5.cpu().to(at::kDouble)});
  control.all_reduce(totals, ReduceOp::kSum);
  r.count = static_cast<int64_t>(totals[2].item<double>());
  const double scored = totals[3].item<double>();
  double denom = static_cast<double>(r.count);
  if (ctx.loss == LossKind::kMse && spec.target_dim > 0) denom *= spec.target_dim;
  if (ctx.loss == LossKind::kCrossEntropy && scored > 0) denom = scored;
  r.loss = r.count > 0 ? totals[0].item<double>() / denom : 0.0;
  r.accuracy = scored > 0 ? totals[1].item<double>() / scored : 0.0;
  if (top5) r.top5 = scored > 0 ? totals[4].item<double>() / scored : 0.0;
  return r;
}

void evaluate_splits(StepContext& ctx, const std::shared_ptr<const Dataset>& test,
                     const std::shared_ptr<const Dataset>& val, int64_t batch,
                     const LoaderOptions& loader, bool ema_output, EvalRecord& rec) {
  rec.result = evaluate(ctx, test, batch, loader);
  if (ctx.ema)
    evaluate_average(*ctx.ema, ema_output, rec, [&] { return evaluate(ctx, test, batch, loader); });
  if (val) rec.val = evaluate(ctx, val, batch, loader);
}

}  // namespace dtrain::detail
