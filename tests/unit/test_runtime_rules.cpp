// The runtime's pure rules: the intra-op thread count (affinity CPUs, ranks sharing them, the
// request), the launcher check (srun's and mpirun's numbers against MPI's), and the watchdog's
// stall report (which rank holds the others up, which does not answer).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/heartbeat.h"
#include "runtime/launch_check.h"
#include "runtime/threads.h"
#include "test_support.h"

namespace dtrain {
namespace {

using detail::choose_threads;

// Whether `text` contains `part` (with both in the failure message).
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

TEST(Threads, DefaultSharesTheAffinityCpusAmongTheRanksThatShareThem) {
  EXPECT_EQ(choose_threads(16, 4, 0).threads, 4);
  EXPECT_EQ(choose_threads(16, 3, 0).threads, 5);
  EXPECT_EQ(choose_threads(8, 1, 0).threads, 8);   // bound to its own 8 CPUs (srun -c 8)
  EXPECT_EQ(choose_threads(1, 1, 0).threads, 1);   // bound to one core (mpirun --bind-to core)
  EXPECT_EQ(choose_threads(2, 4, 0).threads, 1);   // oversubscribed: still one thread
  EXPECT_EQ(choose_threads(0, 0, 0).threads, 1);   // nonsense in, one thread out
  EXPECT_TRUE(choose_threads(16, 4, 0).warning.empty());
  EXPECT_TRUE(contains(choose_threads(16, 4, 0).reason, "16 CPU(s) this process may use"));
  EXPECT_TRUE(contains(choose_threads(16, 4, 0).reason, "shared by 4 rank(s)"));
}

TEST(Threads, AnExplicitCountIsKeptUpToTheAffinityCpus) {
  EXPECT_EQ(choose_threads(8, 4, 3).threads, 3);  // asked for: not divided
  EXPECT_EQ(choose_threads(8, 4, 8).threads, 8);
  EXPECT_TRUE(choose_threads(8, 4, 8).warning.empty());
}

TEST(Threads, AnExplicitCountAboveTheAffinityCpusIsCappedWithAWarning) {
  const auto c = choose_threads(4, 1, 32);
  EXPECT_EQ(c.threads, 4);
  EXPECT_TRUE(contains(c.warning, "run.threads = 32"));
  EXPECT_TRUE(contains(c.warning, "4 CPU(s) this process may use"));
  EXPECT_TRUE(contains(c.warning, "using 4"));
}

TEST(Threads, ThisProcessHasAtLeastOneCpu) { EXPECT_GE(detail::affinity_cpus(), 1); }

using Env = std::map<std::string, std::string>;

std::string launch_error(const Env& env, int rank, int world, int local) {
  const std::string m = test::message_of([&] { detail::check_launch(env, rank, world, local); });
  return m == "NO EXCEPTION" ? "" : m;
}

TEST(LaunchCheck, SrunTasksThatDidNotJoinOneMpiJobAreAnError) {
  const Env env = {{"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "2"},
                   {"SLURM_LOCALID", "2"}};
  const std::string e = launch_error(env, 0, 1, 0);
  EXPECT_TRUE(contains(e, "MPI/PMI setup is wrong"));
  EXPECT_TRUE(contains(e, "task 2 of 4 (local task 2"));
  EXPECT_TRUE(contains(e, "MPI sees rank 0 of 1 (local rank 0)"));
  EXPECT_TRUE(contains(e, "srun --mpi=pmix"));
  EXPECT_EQ(launch_error(env, 2, 4, 2), "");  // PMI worked: the same numbers
  EXPECT_NE(launch_error(env, 2, 4, 0), "");  // local rank differs
  // The step's task count wins over the job's.
  Env step = env;
  step["SLURM_STEP_NUM_TASKS"] = "8";
  EXPECT_NE(launch_error(step, 2, 4, 2), "");
  EXPECT_EQ(launch_error(step, 2, 8, 2), "");
}

TEST(LaunchCheck, OutsideAnSrunStepSlurmVariablesAreNotChecked) {
  // The batch script itself (no step id, or Slurm's batch/extern step ids), or no Slurm at all.
  EXPECT_EQ(launch_error({{"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "0"}}, 0, 1, 0), "");
  EXPECT_EQ(launch_error({{"SLURM_STEP_ID", "4294967294"}, {"SLURM_NTASKS", "16"},
                          {"SLURM_PROCID", "0"}},
                         0, 1, 0),
            "");
  EXPECT_EQ(launch_error({}, 0, 1, 0), "");
}

TEST(LaunchCheck, UnderMpirunOmpiVariablesWinOverInheritedSlurmOnes) {
  // mpirun inside an allocation: the ranks inherit the daemon's SLURM_PROCID, which is not theirs.
  Env env = {{"SLURM_STEP_ID", "0"},          {"SLURM_NTASKS", "2"},
             {"SLURM_PROCID", "1"},           {"SLURM_LOCALID", "0"},
             {"OMPI_COMM_WORLD_SIZE", "8"},   {"OMPI_COMM_WORLD_RANK", "5"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  EXPECT_EQ(launch_error(env, 5, 8, 1), "");
  const std::string e = launch_error(env, 0, 1, 0);
  EXPECT_TRUE(contains(e, "MPI setup is wrong: mpirun started this process as rank 5 of 8"));
  EXPECT_TRUE(contains(e, "MPI sees rank 0 of 1"));
  EXPECT_FALSE(contains(e, "srun"));
}

TEST(LaunchCheck, AnSrunTaskWithoutAnyPmiIsRefusedBeforeMpiStarts) {
  // srun --mpi=none: the step's variables and no PMIx / PMI ones (what a real srun sets).
  Env env = {{"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "2"},
             {"SLURM_PROCID", "1"},  {"SLURM_LOCALID", "1"}};
  const std::string e = detail::launch_error_before_mpi(env);
  EXPECT_TRUE(contains(e, "srun started this process as task 1 of 2 without PMIx or PMI"));
  EXPECT_TRUE(contains(e, "srun --mpi=pmix"));
  EXPECT_TRUE(contains(e, "DTRAIN_SRUN_ARGS=--mpi=pmix"));
  // A single task without PMI cannot start Open MPI either.
  EXPECT_NE(detail::launch_error_before_mpi({{"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "1"},
                                             {"SLURM_PROCID", "0"}}),
            "");
  // Any PMI: MPI_Init may join the tasks; the check after it compares the numbers.
  for (const char* pmi : {"PMIX_RANK", "PMI_RANK", "PMI_FD"}) {
    Env with = env;
    with[pmi] = "1";
    EXPECT_EQ(detail::launch_error_before_mpi(with), "") << pmi;
  }
  // mpirun's ranks, a batch script (no step), no Slurm at all: nothing to say.
  Env ompi = env;
  ompi["OMPI_COMM_WORLD_SIZE"] = "2";
  EXPECT_EQ(detail::launch_error_before_mpi(ompi), "");
  EXPECT_EQ(detail::launch_error_before_mpi({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "0"}}), "");
  EXPECT_EQ(detail::launch_error_before_mpi({}), "");
}

std::optional<detail::Heartbeat> beat(int64_t step, int64_t seq, double age, const char* phase) {
  detail::Heartbeat b;
  b.step = step;
  b.seq = seq;
  b.age_s = age;
  std::strncpy(b.phase, phase, sizeof(b.phase) - 1);
  return b;
}

TEST(StallReport, NamesTheRankBehindAndWhereTheOthersWait) {
  std::vector<std::optional<detail::Heartbeat>> beats = {
      beat(42, 3, 61, "gradient all-reduce"), beat(42, 3, 61.2, "gradient all-reduce"),
      beat(41, 6, 63, "hooks: on_step"), beat(42, 3, 60.7, "gradient all-reduce")};
  const std::string s = detail::describe_stall(beats, 0, 5);
  EXPECT_TRUE(
      contains(s, "rank 2 has not beaten for 63 s (last phase: hooks: on_step at step 41)"));
  EXPECT_TRUE(contains(s, "ranks 0,1,3 wait in gradient all-reduce at step 42 (for 61 s)"));
  // Within one step, the rank fewer beats in is the one behind, whoever beat last.
  beats = {beat(7, 4, 10, "gradient all-reduce"), beat(7, 1, 9, "hooks: on_step_begin")};
  EXPECT_TRUE(contains(detail::describe_stall(beats, 0, 5),
                       "rank 1 has not beaten for 9 s (last phase: hooks: on_step_begin at step 7)"));
}

TEST(StallReport, ARankThatDoesNotAnswerIsNamed) {
  std::vector<std::optional<detail::Heartbeat>> beats = {
      beat(3, 2, 30, "gradient all-reduce"), std::nullopt, beat(3, 2, 30, "gradient all-reduce")};
  const std::string s = detail::describe_stall(beats, 0, 2);
  EXPECT_TRUE(contains(s, "rank 1 does not answer (no heartbeat within 2 s"));
  EXPECT_TRUE(contains(s, "ranks 0,2 wait in gradient all-reduce at step 3"));
}

TEST(StallReport, RanksAllAtOnePlaceAreSaidToBe) {
  std::vector<std::optional<detail::Heartbeat>> beats = {beat(0, 1, 20, "parameter broadcast"),
                                                         beat(0, 1, 20, "parameter broadcast")};
  const std::string s = detail::describe_stall(beats, 1, 2);
  EXPECT_TRUE(contains(s, "ranks 0,1 wait in parameter broadcast before the first step"));
  EXPECT_TRUE(contains(s, "no rank is behind the others"));
}

}  // namespace
}  // namespace dtrain
