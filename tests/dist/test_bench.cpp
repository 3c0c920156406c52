// `dtrain bench`'s sweep under mpirun: every rank runs every setting; a size that runs out of
// memory on one rank only (a FaultInjector, mid-run) is "does not fit" on every rank, is never
// retried at a smaller size, and the sweep goes on to the next setting; the rows agree on every
// rank and their rates follow from the timed steps (samples = steps x global batch). Out of
// memory in the start-up on one rank (the first optimizer step's) is "does not fit" too.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <memory>
#include <vector>

#include "bench/sweep.h"
#include "dtrain/config.h"
#include "dtrain/runtime.h"
#include "dtrain/trainer.h"

namespace dtrain {
namespace {

const char* kBenchCfg = R"(
run: {name: bench, seed: 5, threads: 1, log_every: 1}
model: {name: mlp, hidden: [16]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 512,
       synthetic_test_size: 64, synthetic_features: 6, synthetic_classes: 3, workers: 1}
train: {epochs: 1, global_batch: 32, optimizer: adamw, lr: 0.01}
)";

// Records every micro-batch attempt of a setting; on the victim rank, fails `fail_micro` from
// step `fail_step` on (each attempt: a shrunken retry would be seen with another size).
class FaultRecorder : public FaultInjector {
 public:
  FaultRecorder(int64_t fail_micro, int64_t fail_step)
      : fail_micro_(fail_micro), fail_step_(fail_step) {}
  Fault before_micro_batch(int64_t step, int64_t micro_batch) override {
    attempts.emplace_back(step, micro_batch);
    return micro_batch == fail_micro_ && step >= fail_step_ ? Fault::kOutOfMemory : Fault::kNone;
  }
  std::vector<std::pair<int64_t, int64_t>> attempts;

 private:
  int64_t fail_micro_, fail_step_;
};

TEST(BenchSweep, DoesNotFitOnOneRankIsEveryRanksAndTheSweepGoesOn) {
  Runtime rt(MPI_COMM_WORLD);
  const int world = rt.world(), victim = world - 1;
  bench::SweepOptions o;
  o.micro_batches = {4, 8, 2};
  o.warmup_steps = 2;
  o.steps = 3;
  const Config base = Config::from_string(kBenchCfg, "<bench>");
  const bench::SweepPlan plan = bench::plan_sweep(base, {}, o, world);
  std::map<int64_t, std::shared_ptr<FaultRecorder>> recorders;
  auto prepare = [&](Trainer& trainer, const bench::Setting& s) {
    auto r = std::make_shared<FaultRecorder>(rt.rank() == victim ? 8 : -1, 1);
    recorders[s.micro_batch] = r;
    trainer.set_fault_injector(r);
  };
  const bench::SweepResult res = bench::run_sweep(rt, plan, "<bench>", o, prepare);
  ASSERT_EQ(res.rows.size(), 3u);
  EXPECT_EQ(res.world, world);
  EXPECT_EQ(res.rule, bench::GlobalBatch::kMicroTimesWorld);
  const int64_t micro[] = {4, 8, 2};
  for (size_t i = 0; i < 3; ++i) {
    const bench::Row& r = res.rows[i];
    SCOPED_TRACE("micro-batch " + std::to_string(micro[i]));
    EXPECT_EQ(r.micro_batch, micro[i]);
    EXPECT_EQ(r.global_batch, micro[i] * world);
    EXPECT_EQ(r.accum_steps, 1);
    if (micro[i] == 8) {
      EXPECT_FALSE(r.fits);
      EXPECT_EQ(r.note, std::string("does not fit: out of memory at step 1") +
                            (world > 1 ? " (on some rank)" : ""));
      // Steps 0 and 1 at size 8 only: the failed step was not redone smaller, on any rank.
      const auto& a = recorders.at(8)->attempts;
      ASSERT_EQ(a.size(), 2u);
      EXPECT_EQ(a[0], std::make_pair(int64_t{0}, int64_t{8}));
      EXPECT_EQ(a[1], std::make_pair(int64_t{1}, int64_t{8}));
      continue;
    }
    EXPECT_TRUE(r.fits) << r.note;
    EXPECT_EQ(r.timed_steps, 3);
    EXPECT_EQ(r.timed_samples, 3 * micro[i] * world);
    EXPECT_GT(r.timed_seconds, 0);
    EXPECT_DOUBLE_EQ(r.samples_per_s, r.timed_samples / r.timed_seconds);
    EXPECT_DOUBLE_EQ(r.step_mean_s, r.timed_seconds / 3);
    EXPECT_GT(r.step_p90_s, 0);
    EXPECT_LE(r.step_p50_s, r.step_p90_s);
    EXPECT_GE(r.data_wait_share, 0);
    EXPECT_LE(r.data_wait_share, 1);
    EXPECT_EQ(r.peak_memory, 0);  // CPU
    EXPECT_FALSE(r.gpu_utilization.has_value());
    // 2 warm-up + 3 timed steps, one attempt each, at the size asked for.
    const auto& a = recorders.at(micro[i])->attempts;
    ASSERT_EQ(a.size(), 5u);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], std::make_pair(int64_t(k), micro[i]));
  }
  // Every rank holds the same rows: the same rates, to the bit.
  double mine[3], low[3], high[3];
  for (size_t i = 0; i < 3; ++i) mine[i] = res.rows[i].samples_per_s;
  MPI_Allreduce(mine, low, 3, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, high, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(low[i], high[i]);
}

TEST(BenchSweep, OutOfMemoryInTheStartUpOnOneRankDoesNotFitAndTheSweepGoesOn) {
  Runtime rt(MPI_COMM_WORLD);
  const int world = rt.world(), victim = world - 1;
  bench::SweepOptions o;
  o.micro_batches = {8, 4};
  o.warmup_steps = 1;
  o.steps = 2;
  const bench::SweepPlan plan =
      bench::plan_sweep(Config::from_string(kBenchCfg, "<bench>"), {}, o, world);
  auto prepare = [&](Trainer& trainer, const bench::Setting& s) {
    if (s.micro_batch == 8 && rt.rank() == victim)
      trainer.set_fault_injector(
          std::make_shared<test::OomAtStartUp>(FaultInjector::StartUp::kFirstUpdate));
  };
  const bench::SweepResult res = bench::run_sweep(rt, plan, "<bench>", o, prepare);
  ASSERT_EQ(res.rows.size(), 2u);
  EXPECT_FALSE(res.rows[0].fits);
  EXPECT_EQ(res.rows[0].note,
            "does not fit: out of memory in the start-up" +
                (world > 1 ? " (on rank " + std::to_string(victim) + ")" : std::string()));
  EXPECT_TRUE(res.rows[1].fits) << res.rows[1].note;
  EXPECT_EQ(res.rows[1].timed_steps, 2);
}

}  // namespace
}  // namespace dtrain
