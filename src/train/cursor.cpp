#include "train/cursor.h"

namespace dtrain::detail {

LoopCursor::LoopCursor(const Config& cfg, const LoopPosition* from, int64_t steps_per_epoch,
                       int64_t total_steps, bool saves)
    : steps_per_epoch_(steps_per_epoch),
      total_steps_(total_steps),
      log_every_(cfg.run.log_every),
      every_steps_(saves ? cfg.checkpoint.every_steps : 0),
      eval_every_(cfg.train.eval_every_steps),
      every_epoch_(saves && cfg.checkpoint.every_epoch),
      epoch_eval_(cfg.train.eval),
      epochs_(cfg.train.epochs) {
  if (!from) return;
  step_ = from->step;
  epoch_end_done_ = from->epoch_end_done;
  saved_step_ = step_;
  epoch_ = step_ / steps_per_epoch_, first_s_ = step_ % steps_per_epoch_;
  // Saved at an epoch's end before its loss read and evaluation ran: resume at that end.
  if (first_s_ == 0 && step_ > 0 && !epoch_end_done_) --epoch_, first_s_ = steps_per_epoch_;
  finished_ = (step_ >= total_steps_ && epoch_end_done_) || from->stopped_early;
}

bool LoopCursor::more_epochs(bool stopped) const {
  return !finished_ && epoch_ < epochs_ && !stopped;
}

bool LoopCursor::read_due(int64_t s) const {
  const bool last = s + 1 == steps_per_epoch_ || step_ == total_steps_;
  return (log_every_ > 0 && step_ % log_every_ == 0) || last || eval_due(s);
}

bool LoopCursor::eval_due(int64_t s) const {
  const bool epoch_ends = s + 1 == steps_per_epoch_ || step_ == total_steps_;
  return eval_every_ > 0 && step_ % eval_every_ == 0 && !(epoch_ends && epoch_eval_);
}

bool LoopCursor::save_due() const { return every_steps_ > 0 && step_ % every_steps_ == 0; }

bool LoopCursor::epoch_save_due() const { return every_epoch_ && saved_step_ != step_; }

bool LoopCursor::final_save_due(bool signal_stop) const {
  return (every_steps_ > 0 || every_epoch_) && saved_step_ != step_ && !signal_stop;
}

}  // namespace dtrain::detail
