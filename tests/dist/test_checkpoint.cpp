// Checkpoints and resume through the Trainer: a run stopped at a step and resumed from its last
// checkpoint ends with the same parameters, losses and evaluations as the same run uninterrupted
// (bit for bit on the same world, within 1e-6 on another; a sharded optimizer's checkpoint,
// Note [sharded optimizer], holds the unsharded state and resumes on one rank unsharded and on
// the world sharded); damaged or foreign checkpoints are
// Errors naming the file and what differs; non-finite losses stop the run or skip the step.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/state.h"
#include "dist/optimizer_shard.h"
#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "dtrain/hooks.h"
#include "dtrain/trainer.h"
#include "util/dir.h"

namespace dtrain {
namespace {

using test::World;

// 600 samples, global batch 32: 18 steps per epoch, 2 epochs; dropout makes the random
// generators part of the state.
const char* kCheckpointCfg = R"(
run: {seed: 5, log_every: 5, threads: 1, quiet: true}
model: {name: mlp, hidden: [16], dropout: 0.1}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 600,
       synthetic_test_size: 64, synthetic_features: 6, synthetic_classes: 3, workers: 1}
train: {epochs: 2, global_batch: 32, optimizer: adamw, lr: 0.02, warmup_steps: 4,
        schedule: cosine, eval: true}
checkpoint: {every_epoch: false}
)";

// A folder every rank of `comm` shares (rank 0 makes it).
std::string shared_tmp(Communicator& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/dtrain-ckpt-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  return gather_strings(comm, dir)[0];
}

class ResumeRecorder : public Hook {
 public:
  std::string name() const override { return "recorder"; }
  void on_start(const RunInfo& run, LoopControl&) override { resumed_step = run.resumed_step; }
  void on_step(const StepRecord& r, LoopControl&) override {
    if (r.loss) losses.emplace_back(r.step, *r.loss);
  }
  void on_eval(const EvalRecord& r, LoopControl&) override { evals.push_back(r.result.loss); }
  std::vector<std::pair<int64_t, double>> losses;
  std::vector<double> evals;
  int64_t resumed_step = -1;
};

// Stops the run after `step` (asked on rank 0): as a stop signal (without its save: as if the job
// were killed there, a pause the run resumes from), or, with `ends`, as an early stop (the run's
// end: a hook's stop without a signal).
class StopAt : public Hook {
 public:
  explicit StopAt(int64_t step, bool ends = false) : step_(step), ends_(ends) {}
  std::string name() const override { return "stop"; }
  void on_step(const StepRecord& r, LoopControl& control) override {
    if (r.step == step_ && World().rank == 0) control.request_stop("test", ends_ ? 0 : SIGTERM);
  }

 private:
  int64_t step_;
  bool ends_;
};

struct RunResult {
  TrainSummary summary;
  std::vector<at::Tensor> params;
  std::shared_ptr<ResumeRecorder> rec;
};

RunResult train(MPI_Comm comm, const std::vector<std::string>& overrides,
                std::shared_ptr<Hook> extra = nullptr,
                std::shared_ptr<FaultInjector> faults = nullptr) {
  test::RunSetup s = test::setup_run(kCheckpointCfg, "checkpoint", overrides, comm, 3);
  Trainer trainer(s.cfg, *s.comm, *s.comm, at::kCPU, s.model, s.data.train, s.data.test);
  RunResult r{{}, {}, std::make_shared<ResumeRecorder>()};
  trainer.add_hook(r.rec);
  if (extra) trainer.add_hook(extra);
  if (faults) trainer.set_fault_injector(faults);
  r.summary = trainer.fit();
  for (const auto& p : s.model->parameters()) r.params.push_back(p.detach().clone());
  return r;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Checkpoint, ResumedMidEpochEqualsUninterruptedBitForBit) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  const RunResult whole = train(MPI_COMM_WORLD, {"run.dir=" + tmp, "run.name=whole"});
  // Saves every 7 steps; stopped at step 10 (one step later with several ranks: the request is
  // agreed at the next boundary), so the resume starts from step 7 with 2 steps in its loss
  // window, and runs through an epoch end and an evaluation to the end.
  const std::vector<std::string> cut = {"run.dir=" + tmp, "run.name=cut",
                                        "checkpoint.every_steps=7"};
  const RunResult first = train(MPI_COMM_WORLD, cut, std::make_shared<StopAt>(10));
  EXPECT_TRUE(first.summary.stopped);
  EXPECT_EQ(first.summary.checkpoint_step, 7);
  const RunResult rest = train(MPI_COMM_WORLD, cut);
  EXPECT_EQ(rest.rec->resumed_step, 7);
  EXPECT_EQ(rest.summary.steps, whole.summary.steps);
  EXPECT_EQ(rest.summary.samples, whole.summary.samples);
  ASSERT_EQ(rest.params.size(), whole.params.size());
  for (size_t i = 0; i < whole.params.size(); ++i)
    EXPECT_TRUE(at::equal(rest.params[i], whole.params[i])) << "parameter " << i;
  // Every loss the resumed run read (from step 10 on) is the uninterrupted run's, exactly.
  ASSERT_FALSE(rest.rec->losses.empty());
  EXPECT_EQ(rest.rec->losses.front().first, 10);
  for (const auto& [step, loss] : rest.rec->losses) {
    bool found = false;
    for (const auto& [s2, l2] : whole.rec->losses)
      if (s2 == step) {
        EXPECT_EQ(loss, l2) << "step " << step;
        found = true;
      }
    EXPECT_TRUE(found) << step;
  }
  EXPECT_EQ(rest.rec->evals, whole.rec->evals);
  EXPECT_EQ(rest.summary.eval.loss, whole.summary.eval.loss);
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, ResumedAtAnEpochEndBeforeItsEvaluationRunsThatEvaluation) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  const RunResult whole = train(MPI_COMM_WORLD, {"run.dir=" + tmp, "run.name=whole"});
  // Step 18 is the first epoch's last: saved before the loss read and evaluation of that end.
  const std::vector<std::string> cut = {"run.dir=" + tmp, "run.name=cut",
                                        "checkpoint.every_steps=18"};
  train(MPI_COMM_WORLD, cut, std::make_shared<StopAt>(18));
  const RunResult rest = train(MPI_COMM_WORLD, cut);
  EXPECT_EQ(rest.rec->resumed_step, 18);
  EXPECT_EQ(rest.rec->evals, whole.rec->evals);  // both epochs' evaluations, the same
  for (size_t i = 0; i < whole.params.size(); ++i)
    EXPECT_TRUE(at::equal(rest.params[i], whole.params[i])) << "parameter " << i;
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, ResumedOnOneRankContinuesTheSameSamplesWithinTolerance) {
  const World w;
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  const std::vector<std::string> no_dropout = {"model.dropout=0", "run.dir=" + tmp};
  // Written by every rank of the world, resumed by rank 0 alone.
  auto cut = no_dropout;
  cut.push_back("run.name=cut");
  cut.push_back("checkpoint.every_steps=9");
  train(MPI_COMM_WORLD, cut, std::make_shared<StopAt>(12));
  if (w.rank == 0) {
    auto whole_cfg = no_dropout;
    whole_cfg.push_back("run.name=whole");
    const RunResult whole = train(MPI_COMM_SELF, whole_cfg);
    const RunResult rest = train(MPI_COMM_SELF, cut);
    EXPECT_EQ(rest.rec->resumed_step, 9);
    EXPECT_EQ(rest.summary.steps, whole.summary.steps);
    for (size_t i = 0; i < whole.params.size(); ++i)
      EXPECT_TRUE(at::allclose(rest.params[i], whole.params[i], 1e-6, 1e-7)) << "parameter " << i;
    EXPECT_NEAR(rest.summary.eval.loss, whole.summary.eval.loss, 1e-6);
  }
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

std::vector<std::string> with(std::vector<std::string> o, const std::vector<std::string>& extra) {
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

TEST(Checkpoint, ShardedRunsWriteShardsThatMakeTheUnshardedStateAndTheSameModel) {
  // The same world, sharded or not (Note [sharded optimizer]), trains the same parameters and
  // saves the same checkpoint: each rank its shard of the optimizer state in its own file, which
  // put together are the unsharded state entry by entry, and the same model.pt.
  // Sharded, the gradients are reduce-scattered, not all-reduced: on two ranks the averages are
  // the same bits; on more, another collective sums the ranks' values in another order, and the
  // values agree to float rounding (seen: 2e-9 in moments of 0.04 at 4 ranks).
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  auto same = [&](const at::Tensor& x, const at::Tensor& y) {
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes()) return false;
    return comm->world() <= 2 ? at::equal(x, y) : at::allclose(x, y, 1e-5, 1e-8);
  };
  const std::string tmp = shared_tmp(*comm);
  const std::vector<std::string> o = {"run.dir=" + tmp, "train.max_steps=5", "train.eval=false",
                                      "checkpoint.every_steps=5"};
  train(MPI_COMM_WORLD, with(o, {"run.name=plain"}));
  train(MPI_COMM_WORLD, with(o, {"run.name=sharded", "dist.shard_optimizer=true"}));
  if (comm->rank() == 0) {
    auto folder = [&](const std::string& name) {
      return tmp + "/" + name + "/checkpoints/step-000000005";
    };
    auto state = [&](const std::string& name) {
      const std::string f = folder(name) + "/state.pt";
      return detail::decode_shared(detail::read_file(f), f);
    };
    const detail::SharedState plain = state("plain"), sharded = state("sharded");
    // Each rank wrote its shard into its own file; put together, they are the whole state (one
    // rank shards nothing: state.pt holds it).
    detail::OptimizerState whole = sharded.optimizer;
    if (comm->world() > 1) {
      EXPECT_TRUE(sharded.optimizer.empty());
      ASSERT_EQ(sharded.optimizer_shards, comm->world());
      std::map<std::string, at::Tensor> pieces;
      for (int r = 0; r < comm->world(); ++r) {
        const std::string f = folder("sharded") + "/" + detail::rank_file_name(r);
        const detail::RankState mine = detail::decode_rank(detail::read_file(f), f);
        EXPECT_FALSE(mine.optimizer_shard.empty()) << f;
        for (const auto& [name, t] : mine.optimizer_shard) pieces[name] = t;
      }
      std::set<std::string> indices;  // the trainable parameters: "step.<i>" for each
      for (const auto& [name, t] : plain.optimizer)
        if (name.rfind("step.", 0) == 0) indices.insert(name);
      std::vector<at::Tensor> params;  // named_parameters() come first in state.pt's model
      for (size_t i = 0; i < indices.size(); ++i) params.push_back(plain.model[i].second);
      whole = detail::whole_optimizer_state(pieces, params, comm->world(), folder("sharded"));
    }
    ASSERT_EQ(whole.size(), plain.optimizer.size());
    std::map<std::string, at::Tensor> by_name(whole.begin(), whole.end());
    for (const auto& [name, t] : plain.optimizer) {
      ASSERT_TRUE(by_name.count(name)) << name;
      EXPECT_EQ(by_name.at(name).scalar_type(), t.scalar_type()) << name;
      EXPECT_TRUE(same(by_name.at(name), t)) << name;
    }
    ASSERT_EQ(sharded.model.size(), plain.model.size());
    for (size_t i = 0; i < plain.model.size(); ++i)
      EXPECT_TRUE(same(sharded.model[i].second, plain.model[i].second)) << plain.model[i].first;
    const std::string a = detail::read_file(folder("sharded") + "/model.pt"),
                      b = detail::read_file(folder("plain") + "/model.pt");
    if (comm->world() <= 2) {
      EXPECT_EQ(a, b);
    }
    EXPECT_EQ(a.size(), b.size());  // the same entries, names and dtypes
  }
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, ShardedOnTwoRanksResumesOnOneUnshardedAndOnTheWorldSharded) {
  const World w;
  if (w.size < 2) GTEST_SKIP() << "needs 2 ranks: runs under mpirun -np 2 and -np 4";
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  const std::vector<std::string> base = {"model.dropout=0", "run.dir=" + tmp};
  const std::string shard = "dist.shard_optimizer=true";
  // Ranks 0 and 1 write it, sharded: saved at step 9, stopped at step 12 (or 13).
  MPI_Comm two = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, w.rank < 2 ? 0 : MPI_UNDEFINED, w.rank, &two);
  if (two != MPI_COMM_NULL) {
    train(two, with(base, {"run.name=cut", "checkpoint.every_steps=9", shard}),
          std::make_shared<StopAt>(12));
    MPI_Comm_free(&two);
  }
  comm->barrier();
  const std::string ck = tmp + "/cut/checkpoints/step-000000009";
  // Every rank of the world, sharded (2 ranks: the writers' own world; 4: another).
  const RunResult on_world =
      train(MPI_COMM_WORLD, with(base, {"run.name=world", "checkpoint.resume=" + ck, shard}));
  EXPECT_EQ(on_world.rec->resumed_step, 9);
  const RunResult uncut_world = train(MPI_COMM_WORLD, with(base, {"run.name=uncut", shard}));
  if (w.size == 2) {  // the same world: bit for bit
    for (size_t i = 0; i < uncut_world.params.size(); ++i)
      EXPECT_TRUE(at::equal(on_world.params[i], uncut_world.params[i])) << "parameter " << i;
  }
  if (w.rank == 0) {
    const RunResult whole = train(MPI_COMM_SELF, with(base, {"run.name=whole"}));
    const RunResult one =
        train(MPI_COMM_SELF, with(base, {"run.name=one", "checkpoint.resume=" + ck}));
    EXPECT_EQ(one.rec->resumed_step, 9);
    EXPECT_EQ(one.summary.steps, whole.summary.steps);
    for (size_t i = 0; i < whole.params.size(); ++i) {
      EXPECT_TRUE(at::allclose(one.params[i], whole.params[i], 1e-6, 1e-7)) << "parameter " << i;
      EXPECT_TRUE(at::allclose(on_world.params[i], whole.params[i], 1e-6, 1e-7))
          << "parameter " << i;
    }
    EXPECT_NEAR(one.summary.eval.loss, whole.summary.eval.loss, 1e-6);
    EXPECT_NEAR(on_world.summary.eval.loss, whole.summary.eval.loss, 1e-6);
  }
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, DamagedOrForeignCheckpointsAreErrorsNamingTheFileAndTheDifference) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  const std::string ck = tmp + "/a/checkpoints/step-000000005";
  train(MPI_COMM_WORLD, {"run.dir=" + tmp, "run.name=a", "train.max_steps=5", "train.eval=false",
                         "checkpoint.every_steps=5"});
  ASSERT_TRUE(detail::is_dir(ck));
  const std::vector<std::string> from = {"run.dir=" + tmp, "run.name=b", "checkpoint.resume=" + ck};
  auto expect_error = [&](const std::vector<std::string>& extra, const std::string& what) {
    auto o = from;
    o.insert(o.end(), extra.begin(), extra.end());
    const std::string m = message_of([&] { train(MPI_COMM_WORLD, o); });
    EXPECT_NE(m.find(what), std::string::npos) << m;
    comm->barrier();
    if (comm->rank() == 0) detail::remove_tree(tmp + "/b");
    comm->barrier();
  };
  // Another model: the key and both values.
  expect_error({"model.hidden=8"}, "model.hidden: [16] in the checkpoint, [8] now");
  // Another data order.
  expect_error({"run.seed=6"}, "run.seed: 5 in the checkpoint, 6 now");
  // A path that is no checkpoint.
  expect_error({"checkpoint.resume=" + tmp + "/nothing"}, "checkpoint.resume");
  const std::string state = ck + "/state.pt";
  const std::string good = detail::read_file(state);
  auto damage = [&](const std::string& bytes) {
    comm->barrier();
    if (comm->rank() == 0) std::ofstream(state, std::ios::binary | std::ios::trunc) << bytes;
    comm->barrier();
  };
  damage(good.substr(0, good.size() / 2));
  expect_error({}, "state.pt: checkpoint file is truncated or changed");
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x5a;
  damage(flipped);
  expect_error({}, "state.pt: checkpoint file is corrupt");
  damage(good);
  comm->barrier();
  if (comm->rank() == 0) std::remove((ck + "/COMPLETE").c_str());
  comm->barrier();
  expect_error({}, "incomplete checkpoint");
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, AHooksStopEndsTheRunInACheckpointThatSaysSoAndIsNotTrainedAgain) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  // Saves every 7 steps; the stop comes after step 14 (asked after 13 with several ranks: agreed
  // one step later), where a save is due too: that save records the end.
  const std::vector<std::string> o = {"run.dir=" + tmp, "run.name=es", "checkpoint.every_steps=7"};
  const RunResult first =
      train(MPI_COMM_WORLD, o, std::make_shared<StopAt>(comm->world() == 1 ? 14 : 13, true));
  EXPECT_TRUE(first.summary.stopped);
  EXPECT_EQ(first.summary.stop_signal, 0);
  EXPECT_EQ(first.summary.steps, 14);
  EXPECT_EQ(first.summary.checkpoint_step, 14);
  const std::string state = tmp + "/es/checkpoints/step-000000014/state.pt";
  const LoopPosition p = detail::decode_shared(detail::read_file(state), state).position;
  EXPECT_TRUE(p.stopped_early);
  EXPECT_EQ(p.stop_reason, "test");  // rank 0's hook asked
  // The same run again: finished, refused on every rank, nothing trained.
  const std::string m = message_of([&] { train(MPI_COMM_WORLD, o); });
  EXPECT_NE(
      m.find("this run has finished: its checkpoint is at step 14, where it stopped early (test)"),
      std::string::npos)
      << m;
  // Under another early-stopping rule it trains on from there to the planned end.
  auto rule = o;
  rule.push_back("train.monitor=test_loss");
  const RunResult on = train(MPI_COMM_WORLD, rule);
  EXPECT_EQ(on.rec->resumed_step, 14);
  EXPECT_EQ(on.summary.steps, 2 * 18);
  EXPECT_FALSE(on.summary.stopped);
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, ANewRunIntoADirectoryWithAnEarlierRunsFilesIsAnError) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::string tmp = shared_tmp(*comm);
  const std::vector<std::string> o = {"run.dir=" + tmp, "run.name=x", "train.max_steps=3",
                                      "train.eval=false"};
  train(MPI_COMM_WORLD, o);  // no checkpoints: metrics.jsonl only
  const std::string m = message_of([&] { train(MPI_COMM_WORLD, o); });
  EXPECT_NE(m.find("holds an earlier run's files ("), std::string::npos) << m;
  EXPECT_NE(m.find(tmp + "/x"), std::string::npos) << m;
  comm->barrier();
  if (comm->rank() == 0) detail::remove_tree(tmp);
}

TEST(Checkpoint, ANonFiniteLossStopsTheRunNamingItsStepOrIsSkipped) {
  const std::vector<std::string> o = {"run.dir=\"\"", "train.eval=false", "run.log_every=10"};
  // Steps done before it: 12, so step 13 is the first with a NaN loss.
  const std::string m =
      message_of([&] { train(MPI_COMM_WORLD, o, nullptr, std::make_shared<test::NanAt>(12)); });
  EXPECT_NE(m.find("the training loss is nan at step 13"), std::string::npos) << m;
  EXPECT_NE(m.find("train.skip_nonfinite"), std::string::npos) << m;

  auto skip = o;
  skip.push_back("train.skip_nonfinite=true");
  const RunResult r = train(MPI_COMM_WORLD, skip, nullptr, std::make_shared<test::NanAt>(12));
  EXPECT_EQ(r.summary.skipped_steps, 1);
  EXPECT_TRUE(std::isfinite(r.summary.last_loss));
  for (const auto& [step, loss] : r.rec->losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  for (const auto& p : r.params) EXPECT_TRUE(at::isfinite(p).all().item<bool>());
}

}  // namespace
}  // namespace dtrain
