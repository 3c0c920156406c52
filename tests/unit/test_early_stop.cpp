// Early stopping's lines (src/hooks/best_model.cpp) in the user's terms (issue 54, point 1): the
// monitored metric by its name and in the progress line's format throughout (an accuracy in
// percent, a loss to 4 decimals), the rule at the start, the count of evaluations without
// improvement, what the stop leaves; no hook names, and the stop reason itself said once.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/records.h"
#include "hooks/standard.h"
#include "model_support.h"

namespace {

using dtrain::Config;
using dtrain::DataSpec;
using dtrain::EvalRecord;
using dtrain::Hook;
using dtrain::LoopControl;
using dtrain::Model;
using dtrain::Monitor;
using dtrain::RunInfo;

struct EarlyStopRun {
  Config cfg;
  RunInfo info;
  LoopControl control;
  std::shared_ptr<Model> model;
  std::shared_ptr<Hook> hook;
  EarlyStopRun(Monitor monitor, int64_t patience) {
    cfg.model.name = "linear";
    cfg.train.global_batch = 16;
    cfg.train.monitor = monitor;
    cfg.train.early_stop_patience = patience;
    cfg.train.eval_every_steps = 10;
    cfg.resolve(1);
    const DataSpec spec = dtrain::test::image_spec({1, 4, 4}, 10);
    model = dtrain::make_model("linear", cfg.model, spec);
    hook = dtrain::detail::make_best_model(*model);
    info.config = &cfg;
    info.rank = 0;
    info.data = spec;
    dtrain::log::configure(0, /*quiet=*/false);
  }
  ~EarlyStopRun() { dtrain::log::configure(0, false); }
  // Evaluation at `step` with this accuracy and loss.
  void eval(int64_t step, double accuracy, double loss) {
    EvalRecord r;
    r.step = step, r.epoch = 1;
    r.result.accuracy = accuracy, r.result.loss = loss, r.result.count = 100;
    hook->on_eval(r, control);
  }
};

TEST(EarlyStop, MetricTextIsTheProgressLinesFormat) {
  EXPECT_EQ(dtrain::detail::metric_text(Monitor::kTestAccuracy, 0.917969), "91.80%");
  EXPECT_EQ(dtrain::detail::metric_text(Monitor::kTestTop5, 1.0), "100.00%");
  EXPECT_EQ(dtrain::detail::metric_text(Monitor::kTestLoss, 2.304178), "2.3042");
  EXPECT_EQ(dtrain::detail::metric_text(Monitor::kValLoss, 0.1), "0.1000");
}

TEST(EarlyStop, LinesNameTheMetricInOneFormatAndNoHook) {
  EarlyStopRun run(Monitor::kTestAccuracy, 2);
  testing::internal::CaptureStdout();
  run.hook->on_start(run.info, run.control);
  run.eval(10, 0.5, 1.0);
  run.eval(20, 0.917969, 0.5);
  run.eval(30, 0.9, 0.6);
  EXPECT_FALSE(run.control.stop_requested());
  run.eval(40, 0.91, 0.55);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(run.control.stop_requested());
  EXPECT_EQ(run.control.stop_signal(), 0);
  EXPECT_NE(out.find("early stopping: training ends once test_accuracy (higher is better) has "
                     "gone 2 evaluations in a row without improving on its best "
                     "(train.early_stop_patience); evaluations at each epoch's end and every 10 "
                     "steps\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("test_accuracy 90.00% at step 30: no improvement on its best, 91.80% at step "
                     "20 (1 of 2 evaluations without improvement before training stops)\n"),
            std::string::npos)
      << out;
  const std::string reason =
      "early stop: test_accuracy has not improved on its best, 91.80% at step 20, for 2 "
      "evaluations in a row";
  EXPECT_EQ(run.control.stop_reason(), reason);
  EXPECT_NE(out.find(reason + " (train.early_stop_patience 2, now 91.00%): training ends after "
                              "step 40; model.pt will hold this step's weights\n"),
            std::string::npos)
      << out;
  // One unit for the metric: a percentage, never the fraction 0.917969; no internal names.
  EXPECT_EQ(out.find("0.9"), std::string::npos) << out;
  EXPECT_EQ(out.find("hook"), std::string::npos) << out;
  EXPECT_EQ(out.find("best_model"), std::string::npos) << out;
  EXPECT_EQ(out.find("evaluation(s)"), std::string::npos) << out;
}

TEST(EarlyStop, ALossIsSaidToFourDecimals) {
  EarlyStopRun run(Monitor::kTestLoss, 1);
  testing::internal::CaptureStdout();
  run.hook->on_start(run.info, run.control);
  run.eval(10, 0.1, 2.304178);
  run.eval(20, 0.1, 2.3048);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(run.control.stop_requested());
  EXPECT_EQ(run.control.stop_reason(),
            "early stop: test_loss has not improved on its best, 2.3042 at step 10, for 1 "
            "evaluation in a row");
  EXPECT_NE(out.find("(lower is better) has gone 1 evaluation in a row"), std::string::npos) << out;
  EXPECT_NE(out.find("(train.early_stop_patience 1, now 2.3048): training ends after step 20"),
            std::string::npos)
      << out;
}

}  // namespace
