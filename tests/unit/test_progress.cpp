// The progress line (src/hooks/progress.cpp) and the live line under it
// (src/util/live_line.h): redraws in place, a newline before any other log line, the ETA
// from the recent rate, timestamped plain lines, off, quiet, and silence on other ranks.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/log.h"
#include "dtrain/records.h"
#include "hooks/standard.h"
#include "util/live_line.h"

namespace {

TEST(LiveLine, RedrawsInPlaceAndEndsBeforeAnyOtherLine) {
  dtrain::log::configure(0, /*quiet=*/false);
  testing::internal::CaptureStdout();
  dtrain::log::end_live();  // none drawn: nothing
  dtrain::log::draw_live("a");
  dtrain::log::draw_live("bb");
  dtrain::log::info("x");
  dtrain::log::end_live();  // already ended by the message
  dtrain::log::draw_live("c");
  dtrain::log::end_live();
  dtrain::log::end_live();
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "\ra\033[K\rbb\033[K\nx\n\rc\033[K\n");
}

TEST(LiveLine, AWarningEndsTheLiveLineFirst) {
  dtrain::log::configure(0, /*quiet=*/false);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  dtrain::log::draw_live("step 3/10");
  dtrain::log::warn("low on memory");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "\rstep 3/10\033[K\n");
  EXPECT_EQ(err, "[rank 0] warning: low on memory\n");
}

struct Fixture {
  dtrain::Config cfg;
  dtrain::RunInfo info;
  dtrain::LoopControl control;
  std::shared_ptr<dtrain::Hook> hook = dtrain::detail::make_progress();
  explicit Fixture(dtrain::ProgressMode mode, bool quiet = false, int rank = 0) {
    cfg.run.progress = mode;
    cfg.run.quiet = quiet;
    cfg.train.global_batch = 16;
    cfg.resolve(1);
    info.config = &cfg;
    info.rank = rank;
    info.micro_batch = 16;
    info.steps_per_epoch = 100;
    info.total_steps = 100;
    dtrain::log::configure(rank, quiet);
  }
  ~Fixture() { dtrain::log::configure(0, false); }
};

dtrain::StepRecord step(int64_t s, double elapsed, std::optional<double> loss = std::nullopt) {
  dtrain::StepRecord r;
  r.step = s, r.epoch = 1, r.epochs = 1, r.total_steps = 100, r.lr = 0.001;
  r.elapsed = elapsed;
  if (loss) r.loss = loss, r.samples_per_s = 250;
  return r;
}

// Feeds the same steps to a hook: redraws at the first step, none 0.05 s later, one at the loss
// read (0.3 s: ETA = 97 steps left × 0.3 s / 2 steps = 14.55 s), and the last step.
std::string feed(Fixture& run) {
  testing::internal::CaptureStdout();
  run.hook->on_start(run.info, run.control);
  run.hook->on_step(step(1, 0.0), run.control);
  run.hook->on_step(step(2, 0.05), run.control);
  dtrain::StepRecord r3 = step(3, 0.3, 2.0);
  dtrain::GpuStats g;
  g.utilization = 97;
  r3.gpu = g;
  run.hook->on_step(r3, run.control);
  run.hook->on_step(step(100, 20.0, 1.5), run.control);
  dtrain::EvalRecord e;
  e.epoch = 1, e.epochs = 1, e.train_loss = 1.5, e.result.loss = 1.25;
  run.hook->on_eval(e, run.control);
  dtrain::TrainSummary s;
  run.hook->on_end(s);
  return testing::internal::GetCapturedStdout();
}

TEST(Progress, LiveRedrawsTheLineWithEtaAndEndsIt) {
  Fixture run(dtrain::ProgressMode::kLive);
  const std::string out = feed(run);
  const std::string first = "\repoch 1/1 step 1/100  elapsed 0s  ETA --\033[K";
  const std::string third =
      "\repoch 1/1 step 3/100  loss 2.0000  lr 0.001  250 samples/s  GPU 97%  elapsed 0s  ETA "
      "15s\033[K";
  const std::string last =
      "\repoch 1/1 step 100/100  loss 1.5000  lr 0.001  250 samples/s  elapsed 20s  ETA 0s\033[K\n";
  EXPECT_NE(out.find(first + third + last), std::string::npos) << out;
  EXPECT_EQ(out.find("step 2/100"), std::string::npos) << "redrawn within 0.2 s: " << out;
  EXPECT_NE(out.find("\033[K\nepoch 1/1  train loss 1.5000  test loss 1.2500"), std::string::npos)
      << out;
  EXPECT_EQ(out.back(), '\n');
}

TEST(Progress, LinesAreTimestampedAtEachLossRead) {
  Fixture run(dtrain::ProgressMode::kLines);
  const std::string out = feed(run);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  const std::regex line(
      R"((^|\n)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d epoch 1/1 step 3/100  loss 2\.0000  lr 0\.001  250 samples/s  GPU 97%  elapsed 0s  ETA 15s\n)");
  EXPECT_TRUE(std::regex_search(out, line)) << out;
  EXPECT_EQ(out.find("step 1/100"), std::string::npos) << "a line without a loss read: " << out;
  EXPECT_NE(out.find("step 100/100"), std::string::npos) << out;
  const std::regex eval(R"(\n\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d epoch 1/1  train loss)");
  EXPECT_TRUE(std::regex_search(out, eval)) << out;
}

// An evaluation inside an epoch (train.eval_every_steps, the end of train.max_steps) says its
// step; one at an epoch's end does not.
TEST(Progress, AnEvaluationInsideAnEpochSaysItsStep) {
  Fixture run(dtrain::ProgressMode::kLive);
  testing::internal::CaptureStdout();
  run.hook->on_start(run.info, run.control);
  dtrain::EvalRecord e;
  e.epoch = 2, e.epochs = 3, e.steps_per_epoch = 468, e.total_steps = 1404;
  e.train_loss = 1.5, e.result.loss = 1.25;
  e.step = 600;
  run.hook->on_eval(e, run.control);
  e.step = 936;
  run.hook->on_eval(e, run.control);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("epoch 2/3 step 600/1404  train loss 1.5000  test loss 1.2500"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("epoch 2/3  train loss 1.5000  test loss 1.2500"), std::string::npos) << out;
}

TEST(Progress, OffQuietAndOtherRanksShowNoProgress) {
  {
    Fixture run(dtrain::ProgressMode::kOff);
    const std::string out = feed(run);
    EXPECT_EQ(out.find("step "), std::string::npos) << out;
    EXPECT_NE(out.find("epoch 1/1  train loss"), std::string::npos) << out;  // results still print
  }
  {
    Fixture run(dtrain::ProgressMode::kLive, /*quiet=*/true);
    EXPECT_EQ(feed(run), "");
  }
  {
    Fixture run(dtrain::ProgressMode::kLive, /*quiet=*/false, /*rank=*/1);
    EXPECT_EQ(feed(run), "");
  }
}

TEST(Progress, SequenceModelsShowTokensPerSecondAndMfu) {
  Fixture run(dtrain::ProgressMode::kLines);
  run.info.tokens_per_sample = 64;
  run.info.flops_per_sample = 4e9;
  run.info.peak_flops = 1e13;  // 250 samples/s × 4 GFLOP / 10 TFLOP/s = 10%
  const std::string out = feed(run);
  EXPECT_NE(out.find("250 samples/s  16000 tokens/s  MFU 10.0%  GPU 97%"), std::string::npos)
      << out;
}

}  // namespace

namespace {

TEST(Progress, TheConfigKeyIsAChoice) {
  EXPECT_EQ(dtrain::Config().run.progress, dtrain::ProgressMode::kAuto);
  const auto cfg = dtrain::Config::from_string("run: {progress: lines}\n");
  EXPECT_EQ(cfg.run.progress, dtrain::ProgressMode::kLines);
  EXPECT_STREQ(dtrain::to_string(dtrain::ProgressMode::kLive), "live");
  std::string msg;
  try {
    dtrain::Config::from_string("run: {progress: fancy}\n");
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("run.progress"), std::string::npos) << msg;
  EXPECT_NE(msg.find("auto | live | lines | off"), std::string::npos) << msg;
}

}  // namespace
