// The training loop's step and epoch, and what is due where it stands. A cursor starts at step 0
// or at a checkpoint's position (LoopPosition, dtrain/records.h): at the checkpoint's step, or,
// when the checkpoint was written at an epoch's end whose loss read and evaluation had not run
// yet, at that end. It counts steps and epochs, remembers whether the current epoch's end has
// run and which step the last save holds (at first, a resumed run's checkpoint's), and answers
// the loop's "once in a while" questions (read the loss? evaluate? save?) from the config. The
// rest of the position (samples, the micro-batch, the loss window) has other owners in the loop.
// Pure (no LibTorch, no communication): tests/unit/test_cursor.cpp.
#pragma once

#include <cstdint>

#include "dtrain/config.h"
#include "dtrain/records.h"

namespace dtrain::detail {

class LoopCursor {
 public:
  // A fresh start (`from` null) or a resumed one, for epochs of `steps_per_epoch` steps and
  // `total_steps` in all. `saves`: checkpoints have a folder, so the save schedule
  // (checkpoint.every_steps, checkpoint.every_epoch, the end) runs.
  LoopCursor(const Config& cfg, const LoopPosition* from, int64_t steps_per_epoch,
             int64_t total_steps, bool saves);

  int64_t step() const { return step_; }  // optimizer steps done
  // 0-based epoch being trained (or whose end runs); after settle(), the last step's.
  int64_t epoch() const { return epoch_; }
  int64_t first_in_epoch() const { return first_s_; }  // the step of `epoch` to start from
  // At an epoch's end: its loss read and evaluation have run (a step starts the next afresh).
  bool epoch_end_done() const { return epoch_end_done_; }
  // A resumed run that had finished: its last epoch's end included, or ended early by a hook's
  // stop (LoopPosition::stopped_early, whatever train.epochs says now): nothing left to do (fit()
  // refuses it, leaving the run's files as they are).
  bool finished() const { return finished_; }
  // Whether the loop goes on to epoch(): the run has not finished, train.epochs has epochs
  // left, and no stop was agreed on. (A run that train.max_steps ends inside an epoch ends at
  // last_step().)
  bool more_epochs(bool stopped) const;
  // Whether step `s` of this epoch is one to run.
  bool runs(int64_t s) const { return s < steps_per_epoch_ && step_ < total_steps_; }
  bool last_step() const { return step_ >= total_steps_; }  // every planned step is done

  void step_done() { ++step_, epoch_end_done_ = false; }
  void epoch_ended() { epoch_end_done_ = true; }
  void next_epoch() { ++epoch_, first_s_ = 0; }
  // After the loop: the epoch of the last step, for a final save.
  void settle() { epoch_ = step_ > 0 ? (step_ - 1) / steps_per_epoch_ : 0; }
  void saved() { saved_step_ = step_; }  // a hook wrote this step's state

  // The loss is read every run.log_every steps, at the last step of each epoch and of the run
  // (`s`: the step of the epoch just done), so that every run has a record of its end, and
  // before an evaluation (its record's training loss).
  bool read_due(int64_t s) const;
  // train.eval_every_steps, unless the epoch's end right after step `s` evaluates (train.eval).
  bool eval_due(int64_t s) const;
  bool save_due() const;        // checkpoint.every_steps
  bool epoch_save_due() const;  // checkpoint.every_epoch, unless this step is saved already
  // The end of training, an early stop's too (a hook's stop: the run has ended, and its
  // checkpoint says so), when the schedule saves at all (checkpoint.every_steps or
  // checkpoint.every_epoch), unless this step is saved already or a stop signal stopped the run
  // (a pause: its save is the signal's own request).
  bool final_save_due(bool signal_stop) const;

 private:
  int64_t steps_per_epoch_, total_steps_;
  int64_t log_every_, every_steps_, eval_every_;
  bool every_epoch_, epoch_eval_;
  int64_t step_ = 0, epoch_ = 0, first_s_ = 0;
  bool epoch_end_done_ = false, finished_ = false;
  int64_t saved_step_ = -1;
  int64_t epochs_;
};

}  // namespace dtrain::detail
