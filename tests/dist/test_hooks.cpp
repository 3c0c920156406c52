// The loop's hooks under mpirun: the events every rank sees and their contents (checked against
// formulas, not against the loop's own arithmetic), stop and save requests made on one rank
// taking effect on every rank at the same step, a hook that throws, and a config that nothing
// changes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/hooks.h"
#include "dtrain/trainer.h"

namespace dtrain {
namespace {

// 600 samples, global batch 32: 18 full steps per epoch (drop_last), 2 epochs.
const char* kHooksCfg = R"(
run: {dir: "", seed: 4, log_every: 5, threads: 1, quiet: true}
model: {name: mlp, hidden: [8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 600,
       synthetic_test_size: 40, synthetic_features: 6, synthetic_classes: 3, workers: 1}
train: {epochs: 2, global_batch: 32, optimizer: adamw, lr: 0.02, warmup_steps: 4,
        schedule: cosine, eval: true}
)";
constexpr int64_t kStepsPerEpoch = 600 / 32;

int my_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
using test::world_size;

// Records every event.
class Recorder : public Hook {
 public:
  std::string name() const override { return "recorder"; }
  void on_start(const RunInfo& run, LoopControl&) override {
    events.push_back("start");
    info = run;
  }
  void on_step_begin(int64_t step) override { events.push_back("begin " + std::to_string(step)); }
  void on_step(const StepRecord& r, LoopControl&) override {
    events.push_back("step " + std::to_string(r.step));
    steps.push_back(r);
  }
  void on_eval(const EvalRecord& r, LoopControl&) override {
    events.push_back("eval " + std::to_string(r.epoch));
    evals.push_back(r);
  }
  bool on_save(const TrainState& s) override {
    events.push_back("save " + std::to_string(s.position.step));
    saves.push_back(s.position.step);
    saved_by.push_back(s.asked_by);
    return true;
  }
  void on_end(TrainSummary& s) override {
    events.push_back("end");
    ended_with = s.steps;
  }
  std::vector<std::string> events;
  RunInfo info;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::vector<int64_t> saves;
  std::vector<int> saved_by;
  int64_t ended_with = -1;
};

// On rank `rank` only, asks to stop (or save) after step `step`.
class Asker : public Hook {
 public:
  Asker(int rank, int64_t step, bool save) : rank_(rank), step_(step), save_(save) {}
  std::string name() const override { return "asker"; }
  void on_step(const StepRecord& r, LoopControl& control) override {
    if (my_rank() != rank_ || r.step != step_) return;
    if (save_)
      control.request_save("test");
    else
      control.request_stop("test");
  }

 private:
  int rank_;
  int64_t step_;
  bool save_;
};

struct HookRun {
  test::RunSetup setup;
  std::unique_ptr<Trainer> trainer;
};

HookRun make_run(const std::vector<std::string>& overrides = {}) {
  HookRun r{test::setup_run(kHooksCfg, "hooks", overrides, MPI_COMM_WORLD, 4), nullptr};
  r.trainer = std::make_unique<Trainer>(r.setup.cfg, *r.setup.comm, *r.setup.comm, at::kCPU,
                                        r.setup.model, r.setup.data.train, r.setup.data.test);
  return r;
}

// Every rank's value, in rank order.
std::vector<int64_t> gathered(int64_t v) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  at::Tensor all = comm->all_gather(at::tensor({v}, at::kLong));
  std::vector<int64_t> out;
  for (int64_t i = 0; i < all.size(0); ++i) out.push_back(all[i][0].item<int64_t>());
  return out;
}

TEST(Hooks, EveryRankSeesTheEventsInOrderWithWhatTheFormulasSay) {
  HookRun r = make_run();
  auto rec = std::make_shared<Recorder>();
  r.trainer->add_hook(rec);
  const TrainSummary s = r.trainer->fit();
  const int64_t total = 2 * kStepsPerEpoch;

  // Order: start, (begin k, step k+1) for every step, an evaluation after each epoch, end.
  std::vector<std::string> want = {"start"};
  for (int64_t k = 0; k < total; ++k) {
    want.push_back("begin " + std::to_string(k));
    want.push_back("step " + std::to_string(k + 1));
    if ((k + 1) % kStepsPerEpoch == 0)
      want.push_back("eval " + std::to_string((k + 1) / kStepsPerEpoch));
  }
  want.push_back("end");
  EXPECT_EQ(rec->events, want);

  EXPECT_EQ(rec->info.world, world_size());
  EXPECT_EQ(rec->info.rank, my_rank());
  EXPECT_EQ(rec->info.steps_per_epoch, kStepsPerEpoch);
  EXPECT_EQ(rec->info.total_steps, total);
  EXPECT_EQ(rec->info.micro_batch, 32 / world_size());
  EXPECT_EQ(rec->info.train_samples, 600);
  EXPECT_EQ(rec->info.test_samples, 40);
  EXPECT_EQ(rec->info.parameters, 6 * 8 + 8 + 8 * 3 + 3);  // mlp 6 -> 8 -> 3

  ASSERT_EQ(static_cast<int64_t>(rec->steps.size()), total);
  for (const StepRecord& st : rec->steps) {
    const int64_t k = st.step - 1;  // 0-based step
    EXPECT_EQ(st.epoch, k / kStepsPerEpoch + 1);
    EXPECT_EQ(st.samples, st.step * 32);
    // Linear warmup over 4 steps, then cosine to zero at the last step.
    const double lr = k < 4 ? 0.02 * (k + 1) / 4.0
                            : 0.02 * 0.5 * (1 + std::cos(M_PI * double(k - 4) / double(total - 4)));
    EXPECT_NEAR(st.lr, lr, 1e-12) << "step " << st.step;
    // The loss is read every 5 steps and at each epoch's last step; every rank reads the same.
    EXPECT_EQ(st.loss.has_value(), st.step % 5 == 0 || st.step % kStepsPerEpoch == 0)
        << "step " << st.step;
    if (st.loss) {
      EXPECT_TRUE(std::isfinite(*st.loss));
      const auto all = gathered(static_cast<int64_t>(std::llround(*st.loss * 1e12)));
      for (int64_t v : all) EXPECT_EQ(v, all[0]) << "step " << st.step;
    }
  }
  ASSERT_EQ(rec->evals.size(), 2u);
  EXPECT_EQ(rec->evals[1].step, total);
  EXPECT_EQ(rec->evals[1].result.count, 40);
  EXPECT_DOUBLE_EQ(rec->evals[1].result.accuracy, s.eval.accuracy);
  EXPECT_EQ(rec->ended_with, total);
  EXPECT_FALSE(s.stopped);
}

TEST(Hooks, StopAskedOnOneRankStopsEveryRankAtTheSameStep) {
  const int asker = world_size() - 1;
  HookRun r = make_run();
  auto rec = std::make_shared<Recorder>();
  r.trainer->add_hook(std::make_shared<Asker>(asker, 5, /*save=*/false));
  r.trainer->add_hook(rec);
  const TrainSummary s = r.trainer->fit();
  // One rank: at once; several: one step later (Note [hook requests]), on every rank alike.
  const int64_t expected = world_size() == 1 ? 5 : 6;
  EXPECT_EQ(s.steps, expected);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.stopped_by, asker);
  for (int64_t v : gathered(s.steps)) EXPECT_EQ(v, expected);
  EXPECT_TRUE(rec->evals.empty());  // a stop skips the evaluation of the epoch it ends
  EXPECT_EQ(rec->events.back(), "end");
}

TEST(Hooks, StopAskedAfterAnEvaluationEndsBeforeTheNextEpoch) {
  class StopAfterEval : public Hook {
   public:
    std::string name() const override { return "stop_after_eval"; }
    void on_eval(const EvalRecord&, LoopControl& control) override {
      if (my_rank() == 0) control.request_stop("evaluated once");
    }
  };
  HookRun r = make_run();
  auto rec = std::make_shared<Recorder>();
  r.trainer->add_hook(std::make_shared<StopAfterEval>());
  r.trainer->add_hook(rec);
  const TrainSummary s = r.trainer->fit();
  EXPECT_EQ(s.steps, kStepsPerEpoch);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(rec->evals.size(), 1u);
}

TEST(Hooks, SaveAskedOnOneRankReachesEveryRankOnce) {
  HookRun r = make_run({"train.epochs=1"});
  auto rec = std::make_shared<Recorder>();
  r.trainer->add_hook(std::make_shared<Asker>(0, 3, /*save=*/true));
  r.trainer->add_hook(rec);
  const TrainSummary s = r.trainer->fit();
  const int64_t expected = world_size() == 1 ? 3 : 4;
  EXPECT_EQ(rec->saves, (std::vector<int64_t>{expected}));
  EXPECT_EQ(rec->saved_by, (std::vector<int>{0}));
  EXPECT_EQ(s.steps, kStepsPerEpoch);  // a save does not stop training
  // The save came between that step and the next one.
  auto at = std::find(rec->events.begin(), rec->events.end(), "save " + std::to_string(expected));
  ASSERT_NE(at, rec->events.end());
  EXPECT_EQ(*(at - 1), "step " + std::to_string(expected));
  EXPECT_EQ(*(at + 1), "begin " + std::to_string(expected));
}

TEST(Hooks, SaveAskedInTheLastStepIsStillDelivered) {
  HookRun r = make_run({"train.epochs=1", "train.eval=false"});
  auto rec = std::make_shared<Recorder>();
  r.trainer->add_hook(std::make_shared<Asker>(0, kStepsPerEpoch, /*save=*/true));
  r.trainer->add_hook(rec);
  r.trainer->fit();
  EXPECT_EQ(rec->saves, (std::vector<int64_t>{kStepsPerEpoch}));
}

TEST(Hooks, AHookThatThrowsIsAnErrorNamingItTheEventAndTheStep) {
  class Thrower : public Hook {
   public:
    std::string name() const override { return "thrower"; }
    void on_step(const StepRecord& r, LoopControl&) override {
      if (r.step == 2) throw std::runtime_error("out of ideas");
    }
  };
  // Every rank throws at the same step here, so no rank is left in a collective; a throw on
  // one rank only ends the job through the error policy (tests/e2e/test_hooks.sh).
  HookRun r = make_run();
  r.trainer->add_hook(std::make_shared<Thrower>());
  try {
    r.trainer->fit();
    FAIL() << "the hook's exception was swallowed";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("hook 'thrower'"), std::string::npos) << m;
    EXPECT_NE(m.find("on_step at step 2"), std::string::npos) << m;
    EXPECT_NE(m.find("out of ideas"), std::string::npos) << m;
  }
}

TEST(Hooks, TheConfigIsTheSameAfterTrainingWithMicroBatchAuto) {
  HookRun r = make_run({"train.micro_batch=auto", "train.epochs=1"});
  const std::string before = r.trainer->config().dump();
  const TrainSummary s = r.trainer->fit();
  EXPECT_EQ(r.trainer->config().dump(), before);
  EXPECT_EQ(r.trainer->config().resolved.micro_batch, -1);  // still "auto": the engine holds it
  EXPECT_EQ(s.micro_batch, 32 / world_size());  // a small model: the whole rank batch fits
}

TEST(Hooks, TheTrainerRefusesAConfigResolvedForAnotherWorld) {
  Config cfg = Config::from_string(kHooksCfg, "hooks");
  cfg.resolve(world_size() == 1 ? 2 : 1);
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  Splits data = make_datasets(cfg.data, cfg.run.seed);
  auto model = make_model(cfg.model.name, cfg.model, data.train->spec());
  try {
    Trainer trainer(cfg, *comm, *comm, at::kCPU, model, data.train, data.test);
    FAIL() << "a config resolved for another world size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("resolved for world"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain
