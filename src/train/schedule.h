// The learning-rate schedule: linear warmup over train.warmup_steps, then constant, a cosine or
// linear decay to zero at the last step, or a decay by train.lr_gamma every train.lr_step_size
// steps. After warmup, step t (from 0) has torch.optim.lr_scheduler's learning rate after t
// scheduler steps: CosineAnnealingLR's closed form, LinearLR(1, 0, T), StepLR(step_size, gamma).
// A schedule may start at a later step (train.resume_schedule restart): from `start` on it is the
// schedule of a run of total - start steps.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/config.h"
#include "train/resume.h"

namespace dtrain::detail {

class LrSchedule {
 public:
  LrSchedule(const TrainConfig& train, int64_t total_steps, int64_t start = 0);
  // The learning rate of step `step` (0-based; steps before `start` have the first one's).
  double at(int64_t step) const;

 private:
  int64_t start_;
  double lr_;
  int64_t warmup_;
  Schedule schedule_;
  int64_t total_;
  int64_t step_size_;
  double gamma_;
};

// The schedule a run resumed from `from` follows (none: a fresh start, from step 0), and the line
// that says what it does to the learning rate when it is not the checkpoint's schedule going on
// as it was: the run ended at the checkpoint and trains on (more train.epochs or
// train.max_steps), or the schedule's length or keys changed. "learning rate at the resume:
// 2.25e-08 after step 468 -> 0.000896 at step 469: ..." naming train.resume_schedule's choice.
// A run that trains on from its end with train.resume_schedule restart starts a new schedule
// there; otherwise the checkpoint's start is kept (a restarted schedule goes on after a
// preemption).
struct ResumedSchedule {
  int64_t start = 0;
  std::string line;  // "" when there is nothing to say
};
ResumedSchedule resumed_schedule(const Config& cfg, int64_t total_steps, const ResumePoint* from);

}  // namespace dtrain::detail
