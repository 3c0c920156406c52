// The training loop's cursor (train/cursor.h): where a fresh or resumed run starts, when it is
// finished, and the due-checks (loss reads, evaluations, saves) by the config's settings.
#include <gtest/gtest.h>

#include "dtrain/config.h"
#include "dtrain/records.h"
#include "train/cursor.h"

namespace dtrain::detail {
namespace {

Config config(const std::vector<std::string>& overrides) {
  return Config::from_string("train: {epochs: 3}\n", "cursor", overrides);
}

LoopPosition at(int64_t step, bool epoch_end_done) {
  LoopPosition p;
  p.step = step;
  p.steps_per_epoch = 10;
  p.epoch_end_done = epoch_end_done;
  return p;
}

TEST(Cursor, AFreshRunStartsAtStepZeroAndCountsStepsAndEpochs) {
  LoopCursor c(config({}), nullptr, 10, 30, true);
  EXPECT_EQ(c.step(), 0);
  EXPECT_EQ(c.epoch(), 0);
  EXPECT_EQ(c.first_in_epoch(), 0);
  EXPECT_FALSE(c.finished());
  EXPECT_TRUE(c.more_epochs(false));
  EXPECT_FALSE(c.more_epochs(/*stopped=*/true));
  for (int64_t s = c.first_in_epoch(); c.runs(s); ++s) c.step_done();
  EXPECT_EQ(c.step(), 10);
  EXPECT_FALSE(c.epoch_end_done());
  c.epoch_ended();
  EXPECT_TRUE(c.epoch_end_done());
  c.next_epoch();
  EXPECT_EQ(c.epoch(), 1);
  EXPECT_EQ(c.first_in_epoch(), 0);
  c.step_done();
  EXPECT_FALSE(c.epoch_end_done());  // a step starts the next epoch's end afresh
}

TEST(Cursor, AResumedRunStartsMidEpochOrAtAnEpochEndThatHadNotRun) {
  const LoopPosition mid = at(13, false);
  LoopCursor c(config({}), &mid, 10, 30, true);
  EXPECT_EQ(c.epoch(), 1);
  EXPECT_EQ(c.first_in_epoch(), 3);
  // Saved right after step 20, before epoch 2's loss read and evaluation: they run first.
  const LoopPosition end_pending = at(20, false);
  LoopCursor e(config({}), &end_pending, 10, 30, true);
  EXPECT_EQ(e.epoch(), 1);
  EXPECT_EQ(e.first_in_epoch(), 10);
  EXPECT_FALSE(e.runs(e.first_in_epoch()));
  // ...and after them: the next epoch.
  const LoopPosition end_done = at(20, true);
  LoopCursor d(config({}), &end_done, 10, 30, true);
  EXPECT_EQ(d.epoch(), 2);
  EXPECT_EQ(d.first_in_epoch(), 0);
  // At the end of training with its epoch's end done: nothing left; not done: the end runs.
  const LoopPosition last = at(30, true), last_pending = at(30, false);
  EXPECT_TRUE(LoopCursor(config({}), &last, 10, 30, true).finished());
  EXPECT_FALSE(LoopCursor(config({}), &last_pending, 10, 30, true).finished());
  // A resumed run's checkpoint holds its first step: no save is due there.
  EXPECT_FALSE(d.epoch_save_due());
  EXPECT_FALSE(d.final_save_due(false));
}

TEST(Cursor, AnEarlyStoppedRunHasFinishedWhereverItStoppedAndWhateverItsPlan) {
  // Stopped by a hook mid-epoch (step 13 of 30), at an epoch's end (20), and at the last step.
  for (const auto& [step, end_done] :
       {std::pair<int64_t, bool>{13, false}, {20, true}, {30, true}}) {
    LoopPosition p = at(step, end_done);
    p.stopped_early = true;
    EXPECT_TRUE(LoopCursor(config({}), &p, 10, 30, true).finished()) << step;
    // A longer plan (train.epochs raised) would have stopped there too: still finished.
    EXPECT_TRUE(LoopCursor(config({"train.epochs=9"}), &p, 10, 90, true).finished()) << step;
    p.stopped_early = false;  // a pause there (a signal): it goes on, unless at the end
    EXPECT_EQ(LoopCursor(config({}), &p, 10, 30, true).finished(), step == 30) << step;
  }
}

TEST(Cursor, LossReadsAreDueEveryLogEveryStepsAndAtTheEndOfEachEpochAndOfTheRun) {
  LoopCursor c(config({"run.log_every=4"}), nullptr, 10, 25, true);
  std::vector<int64_t> reads;
  for (int64_t epoch = 0; epoch < 3; ++epoch, c.next_epoch())
    for (int64_t s = c.first_in_epoch(); c.runs(s); ++s) {
      c.step_done();
      if (c.read_due(s)) reads.push_back(c.step());
    }
  EXPECT_EQ(reads, (std::vector<int64_t>{4, 8, 10, 12, 16, 20, 24, 25}));
  LoopCursor once(config({"run.log_every=0"}), nullptr, 10, 20, true);
  std::vector<int64_t> ends;
  for (int64_t s = 0; once.runs(s); ++s) {
    once.step_done();
    if (once.read_due(s)) ends.push_back(once.step());
  }
  EXPECT_EQ(ends, (std::vector<int64_t>{10}));
}

TEST(Cursor, SavesAreDueBySchedule) {
  LoopCursor c(config({"checkpoint.every_steps=3", "checkpoint.every_epoch=true"}), nullptr, 10, 30,
               true);
  std::vector<int64_t> due;
  for (int64_t s = 0; c.runs(s); ++s) {
    c.step_done();
    if (c.save_due()) due.push_back(c.step()), c.saved();
  }
  EXPECT_EQ(due, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_TRUE(c.epoch_save_due());  // step 10 is not saved yet
  c.saved();
  EXPECT_FALSE(c.epoch_save_due());
  EXPECT_FALSE(c.final_save_due(false));
  c.step_done();
  EXPECT_TRUE(c.final_save_due(false));  // the end, or an early stop (a hook's): it has ended
  EXPECT_FALSE(c.final_save_due(/*signal_stop=*/true));  // a pause: the signal asked its own save
  // With neither key the end is not saved either.
  LoopCursor unscheduled(config({"checkpoint.every_epoch=false"}), nullptr, 10, 30, true);
  unscheduled.step_done();
  EXPECT_FALSE(unscheduled.save_due());
  EXPECT_FALSE(unscheduled.epoch_save_due());
  EXPECT_FALSE(unscheduled.final_save_due(false));
  // Without a folder for checkpoints, nothing is ever due.
  LoopCursor none(config({"checkpoint.every_steps=1"}), nullptr, 10, 30, /*saves=*/false);
  none.step_done();
  EXPECT_FALSE(none.save_due());
  EXPECT_FALSE(none.epoch_save_due());
  EXPECT_FALSE(none.final_save_due(false));
}

TEST(Cursor, EvaluationsAreDueEveryNStepsOnceWhereAnEpochEnds) {
  // Epochs of 10 steps, 25 steps in all (the run ends inside its third epoch), every 4 steps.
  auto due_at = [](const std::vector<std::string>& overrides, std::vector<int64_t>* reads) {
    LoopCursor c(config(overrides), nullptr, 10, 25, false);
    std::vector<int64_t> due;
    for (; c.more_epochs(false); c.next_epoch()) {
      for (int64_t s = c.first_in_epoch(); c.runs(s); ++s) {
        c.step_done();
        if (c.eval_due(s)) due.push_back(c.step());
        if (reads && c.read_due(s)) reads->push_back(c.step());
      }
      if (c.last_step()) break;
    }
    return due;
  };
  std::vector<int64_t> reads;
  // Step 20 ends an epoch, which train.eval evaluates anyway.
  EXPECT_EQ(due_at({"train.eval_every_steps=4", "run.log_every=0"}, &reads),
            (std::vector<int64_t>{4, 8, 12, 16, 24}));
  // The loss is read before each evaluation, and at each epoch's end and the run's.
  EXPECT_EQ(reads, (std::vector<int64_t>{4, 8, 10, 12, 16, 20, 24, 25}));
  EXPECT_EQ(due_at({"train.eval_every_steps=4", "train.eval=false"}, nullptr),
            (std::vector<int64_t>{4, 8, 12, 16, 20, 24}));
  EXPECT_EQ(due_at({"train.eval_every_steps=5", "train.eval=false"}, nullptr),
            (std::vector<int64_t>{5, 10, 15, 20, 25}));
  EXPECT_TRUE(due_at({}, nullptr).empty());
}

}  // namespace
}  // namespace dtrain::detail
