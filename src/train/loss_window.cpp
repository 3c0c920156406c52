#include "train/loss_window.h"

#include <cmath>
#include <string>

#include "dtrain/error.h"

namespace dtrain::detail {

LossWindow::LossWindow(EagerStep& eager, Communicator& control, Watchdog& watchdog,
                       Precision precision, int64_t first_step)
    : eager_(eager), control_(control), watchdog_(watchdog), precision_(precision),
      first_(first_step) {}

void LossWindow::restore(const LoopPosition& from, int saved_world) {
  // The next read sums every rank's window: rank 0 carries the saved sum, scaled to this world
  // so that the mean over ranks comes out as the checkpoint's.
  const double mine = control_.rank() == 0 ? from.window_loss * control_.world() / saved_world : 0;
  eager_.restore_window(mine, from.window_steps);
  steps_ = from.window_steps;
  first_ = from.step - from.window_steps;
}

double LossWindow::read(int64_t step) {
  const double mean = reduce(/*take=*/true).second;
  steps_ = 0;
  first_ = step;
  return mean;
}

double LossWindow::total() { return reduce(/*take=*/false).first; }

std::pair<double, double> LossWindow::reduce(bool take) {
  watchdog_.beat("reading the loss (control all-reduce)");
  const EagerStep::Window w = take ? eager_.take_window() : eager_.peek_window();
  at::Tensor l = at::tensor({w.sum, static_cast<double>(steps_ - w.left_out)}, at::kDouble);
  control_.all_reduce(l, ReduceOp::kSum);
  const double sum = l[0].item<double>(), count = l[1].item<double>();
  if (!std::isfinite(sum)) {
    at::Tensor first = at::tensor({w.finite_steps}, at::kLong);
    control_.all_reduce(first, ReduceOp::kMin);
    throw Error("the training loss is " + std::string(std::isnan(sum) ? "nan" : "infinite") +
                    " at step " + std::to_string(first_ + first.item<int64_t>() + 1) + " (" +
                    to_string(precision_) +
                    "): the run stops rather than train on; lower train.lr, set "
                    "train.clip_grad_norm, or skip such steps with train.skip_nonfinite=true",
                "train.skip_nonfinite");
  }
  return {sum, count > 0 ? sum / count : std::nan("")};
}

}  // namespace dtrain::detail
