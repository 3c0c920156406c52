#include "train/loss_window.h"

#include <cmath>
#include <string>

#include "dtrain/error.h"

namespace dtrain::detail {

LossWindow::LossWindow(const StepContext& ctx, int64_t first_step)
    : ctx_(ctx),
      sum_(at::zeros({}, at::TensorOptions().device(ctx.device).dtype(at::kDouble))),
      finite_steps_(at::zeros({}, at::TensorOptions().device(ctx.device).dtype(at::kLong))),
      first_(first_step) {}

void LossWindow::restore(const LoopPosition& from, int saved_world) {
  // The next read sums every rank's window: rank 0 carries the saved sum, scaled to this world
  // so that the mean over ranks comes out as the checkpoint's.
  const Communicator& control = *ctx_.control;
  const double mine = control.rank() == 0 ? from.window_loss * control.world() / saved_world : 0;
  sum_ += mine;
  finite_steps_ += from.window_steps;
  steps_ = from.window_steps;
  first_ = from.step - from.window_steps;
}

void LossWindow::add(const at::Tensor& loss_sum) {
  // Kept on the device: reading it here would stall the host on every step. The finite-step
  // count names the first non-finite step when the window is read (two small kernels).
  sum_ += loss_sum;
  finite_steps_ += at::isfinite(sum_);
}

double LossWindow::read(int64_t step) {
  const double mean = reduce(/*take=*/true).second;
  steps_ = 0;
  first_ = step;
  return mean;
}

double LossWindow::total() { return reduce(/*take=*/false).first; }

std::pair<double, double> LossWindow::reduce(bool take) {
  ctx_.watchdog->beat("reading the loss (control all-reduce)");
  const at::Tensor both = at::stack({sum_, finite_steps_.to(at::kDouble)}).cpu();  // host sync
  const double mine = both[0].item<double>();
  const auto finite = static_cast<int64_t>(both[1].item<double>());
  const int64_t left_out = left_out_;
  if (take) {
    sum_.zero_();
    finite_steps_.zero_();
    left_out_ = 0;
  }
  at::Tensor l = at::tensor({mine, static_cast<double>(steps_ - left_out)}, at::kDouble);
  ctx_.control->all_reduce(l, ReduceOp::kSum);
  const double sum = l[0].item<double>(), count = l[1].item<double>();
  if (!std::isfinite(sum)) {
    at::Tensor first = at::tensor({finite}, at::kLong);
    ctx_.control->all_reduce(first, ReduceOp::kMin);
    throw Error("the training loss is " + std::string(std::isnan(sum) ? "nan" : "infinite") +
                    " at step " + std::to_string(first_ + first.item<int64_t>() + 1) + " (" +
                    to_string(ctx_.precision) +
                    "): the run stops rather than train on; lower train.lr, set "
                    "train.clip_grad_norm, or skip such steps with train.skip_nonfinite=true",
                "train.skip_nonfinite");
  }
  return {sum, count > 0 ? sum / count : std::nan("")};
}

}  // namespace dtrain::detail
