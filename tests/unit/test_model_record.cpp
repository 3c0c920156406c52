// model.json (src/hooks/model_record.h): the step its weights are of, why the run ended there,
// the evaluation of that very step and never another's (null when none ran at it), the
// checkpoint of that step only; recorded_step() reads the step back, -1 when it cannot.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "dtrain/hooks.h"
#include "dtrain/records.h"
#include "hooks/model_record.h"
#include "test_support.h"

namespace {

using dtrain::test::TempDir;
using nlohmann::json;
namespace d = dtrain::detail;

// A classification run of 16 steps per epoch, 640 planned, ended after step 130.
struct Ended {
  dtrain::RunInfo run;
  dtrain::TrainSummary s;
  Ended() {
    run.steps_per_epoch = 16;
    run.data.num_classes = 4;
    s.steps = 130, s.total_steps = 640;
    s.eval.loss = 0.25, s.eval.accuracy = 0.875, s.eval.count = 512;
    s.eval_step = 130;
    s.checkpoint = "runs/x/checkpoints/step-000000130", s.checkpoint_step = 130;
  }
  json record() const { return json::parse(d::model_record(s, run)); }
};

TEST(ModelRecord, NamesTheStepTheEndAndThatStepsEvaluation) {
  Ended e;
  e.s.stopped = true, e.s.stopped_by = 0,
  e.s.stop_reason = "early stop: test_loss has not improved";
  const json j = e.record();
  EXPECT_EQ(j["weights"], "model.pt");
  EXPECT_EQ(j["step"], 130);
  EXPECT_EQ(j["epoch"], 9);  // steps 129-144 are epoch 9's
  EXPECT_EQ(j["steps_per_epoch"], 16);
  EXPECT_EQ(j["total_steps"], 640);
  EXPECT_EQ(j["ended"], "early stop");
  EXPECT_EQ(j["stop_reason"], "early stop: test_loss has not improved");
  EXPECT_EQ(j["stopped_by_rank"], 0);
  EXPECT_EQ(
      j["evaluation"],
      json({{"step", 130}, {"test_count", 512}, {"test_loss", 0.25}, {"test_accuracy", 0.875}}));
  EXPECT_EQ(j["checkpoint"], "runs/x/checkpoints/step-000000130");
}

TEST(ModelRecord, AnEvaluationOfAnotherStepOrACheckpointOfAnotherStepIsNotTheFiles) {
  Ended e;
  e.s.steps = e.s.total_steps = 640;  // completed: its last evaluation was at step 630
  e.s.eval_step = 630;
  e.s.checkpoint_step = 630;
  const json j = e.record();
  EXPECT_EQ(j["ended"], "completed");
  EXPECT_FALSE(j.contains("stop_reason"));
  EXPECT_EQ(j["epoch"], 40);
  EXPECT_TRUE(j["evaluation"].is_null());
  EXPECT_TRUE(j["checkpoint"].is_null());
  e.s.eval.count = 0, e.s.eval_step = -1;  // no evaluation at all
  EXPECT_TRUE(e.record()["evaluation"].is_null());
  // Regression (no classes): no accuracy; a top-5 when there is one.
  Ended r;
  r.run.data.num_classes = 0;
  EXPECT_FALSE(r.record()["evaluation"].contains("test_accuracy"));
  r.s.eval.top5 = 0.5;
  EXPECT_EQ(r.record()["evaluation"]["test_top5_accuracy"], 0.5);
}

TEST(ModelRecord, RecordedStepReadsTheStepOrSaysItIsNotKnown) {
  TempDir dir;
  const std::string path = dir.file("model.json");
  EXPECT_EQ(d::recorded_step(path), -1);  // none
  std::ofstream(path) << d::model_record(Ended().s, Ended().run);
  EXPECT_EQ(d::recorded_step(path), 130);
  std::ofstream(path, std::ios::trunc) << "{\"step\": \"130\"";
  EXPECT_EQ(d::recorded_step(path), -1);  // not such a file
}

}  // namespace
