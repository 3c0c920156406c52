// The learning-rate schedules (train/schedule.h) against torch.optim.lr_scheduler in
// DTRAIN_REF_PYTHON (Debian's python3-torch): after warmup, dtrain's step t has the rate that
// CosineAnnealingLR, LinearLR(1, 0, T) and StepLR(step_size, gamma) give after t scheduler steps;
// during warmup, lr * (t + 1) / warmup (LambdaLR of that factor). Every step of a run compared.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "test_support.h"
#include "train/schedule.h"
#include "util/format.h"

namespace dtrain {
namespace {

using detail::config_values;
using detail::format;
using test::message_of;
using test::python_failure;
using test::run_python;

const char* kReference = R"PY(
import sys
import torch
kind, lr, warmup, total, step_size, gamma = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
p = [torch.zeros(1, requires_grad=True)]
warm = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD(p, lr=lr), lambda t: (t + 1) / warmup) if warmup else None
opt = torch.optim.SGD(p, lr=lr)
span = total - warmup
if kind == "cosine":
    main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=span)
elif kind == "linear":
    main = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=span)
elif kind == "step":
    main = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)
else:
    main = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0)
out = []
for t in range(total):
    if t < warmup:
        out.append(warm.get_last_lr()[0])
        warm.optimizer.step()
        warm.step()
    else:
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        main.step()
print(" ".join(repr(v) for v in out))
)PY";

void expect_like_torch(Schedule kind, int64_t warmup, int64_t total, int64_t step_size = 0,
                       double gamma = 0.1) {
  TrainConfig t;
  t.lr = 0.3;
  t.schedule = kind;
  t.warmup_steps = warmup;
  t.lr_step_size = step_size;
  t.lr_gamma = gamma;
  SCOPED_TRACE(std::string(to_string(kind)) + ", warmup " + std::to_string(warmup) + ", " +
               std::to_string(total) + " steps");
  const detail::LrSchedule s(t, total);
  test::TempDir dir;
  const auto run = run_python(dir, kReference,
                              std::string(to_string(kind)) + " 0.3 " + std::to_string(warmup) +
                                  " " + std::to_string(total) + " " + std::to_string(step_size) +
                                  " " + std::to_string(gamma));
  ASSERT_EQ(run.status, 0) << python_failure("the lr_scheduler reference", run);
  std::istringstream in(run.output);
  std::vector<double> want;
  for (double v; in >> v;) want.push_back(v);
  ASSERT_EQ(static_cast<int64_t>(want.size()), total);
  for (int64_t i = 0; i < total; ++i)
    EXPECT_NEAR(s.at(i), want[static_cast<size_t>(i)], 1e-12 + 1e-9 * want[static_cast<size_t>(i)])
        << "step " << i;
}

TEST(Schedule, EveryKindMatchesTorchsLrScheduler) {
  expect_like_torch(Schedule::kConstant, 0, 20);
  expect_like_torch(Schedule::kCosine, 0, 40);
  expect_like_torch(Schedule::kCosine, 5, 40);
  expect_like_torch(Schedule::kLinear, 0, 30);
  expect_like_torch(Schedule::kLinear, 4, 30);
  expect_like_torch(Schedule::kStep, 0, 35, 10, 0.5);
  expect_like_torch(Schedule::kStep, 3, 35, 7, 0.1);
}

// A schedule started at step `start` is the schedule of a run of total - start steps from there:
// cosine, lr/2 (1 + cos(pi t / n)) with t the steps since `start`.
TEST(Schedule, AScheduleStartedLaterIsThatOfTheStepsFromThere) {
  TrainConfig t;
  t.lr = 0.2;
  t.schedule = Schedule::kCosine;
  const detail::LrSchedule s(t, 48, 32);
  for (int64_t i = 0; i < 16; ++i)
    EXPECT_NEAR(s.at(32 + i), 0.1 * (1 + std::cos(M_PI * static_cast<double>(i) / 16.0)), 1e-15)
        << "step " << 32 + i;
}

// Which schedule a resumed run follows: training on from a finished run's end restarts it with
// train.resume_schedule restart (and the start is kept after a later preemption); stretch, and
// a resume before the run's end, keep the checkpoint's start. The line gives the rates.
TEST(Schedule, AResumeKeepsOrRestartsTheScheduleAndSaysTheRates) {
  auto config = [](const std::vector<std::string>& overrides) {
    Config c = Config::from_string("train: {lr: 0.2, schedule: cosine}\n", "x.yaml", overrides);
    c.resolve(1);
    return c;
  };
  detail::ResumePoint end;  // the end of a 2-epoch run of 16 steps per epoch
  end.position.step = 32;
  end.position.steps_per_epoch = 16;
  end.saved_config = config_values(config({"train.epochs=2"}));
  const double before = 0.1 * (1 + std::cos(M_PI * 31.0 / 32.0));

  const auto stretch = detail::resumed_schedule(config({"train.epochs=3"}), 48, &end);
  EXPECT_EQ(stretch.start, 0);
  EXPECT_EQ(
      stretch.line,
      format("learning rate at the resume: %.3g after step 32 -> %.3g at step 33: the cosine "
             "schedule of a 48-step run (train.resume_schedule stretch; restart would start a "
             "new schedule over the 16 added steps)",
             before, 0.1 * (1 + std::cos(M_PI * 32.0 / 48.0))));
  const auto restart = detail::resumed_schedule(
      config({"train.epochs=3", "train.resume_schedule=restart"}), 48, &end);
  EXPECT_EQ(restart.start, 32);
  EXPECT_EQ(restart.line,
            format("learning rate at the resume: %.3g after step 32 -> 0.2 at step 33: "
                   "train.resume_schedule restart: a new cosine schedule over the 16 added steps",
                   before));

  detail::ResumePoint later = end;  // the restarted run, preempted at step 40
  later.position.step = 40;
  later.position.schedule_start = 32;
  later.saved_config = config_values(config({"train.epochs=3", "train.resume_schedule=restart"}));
  const auto again = detail::resumed_schedule(
      config({"train.epochs=3", "train.resume_schedule=restart"}), 48, &later);
  EXPECT_EQ(again.start, 32);
  EXPECT_EQ(again.line, "");
  EXPECT_EQ(detail::resumed_schedule(config({"train.epochs=3"}), 48, nullptr).start, 0);
}

TEST(Schedule, StepNeedsAStepSize) {
  TrainConfig t;
  t.schedule = Schedule::kStep;
  const std::string msg = message_of([&] { detail::LrSchedule(t, 10); });
  EXPECT_NE(msg.find("train.lr_step_size"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dtrain
