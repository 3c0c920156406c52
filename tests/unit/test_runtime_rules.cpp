// The runtime's pure rules: the intra-op thread count (affinity CPUs, ranks sharing them, the
// request), the launcher's binding against the host's CPUs (idle CPUs, the advice), the launcher
// check (srun's and mpirun's numbers against MPI's, an srun task without PMI), and the watchdog's
// stall report (which rank holds the others up, which does not answer).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu_binding.h"
#include "runtime/gpu_sharing.h"
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
  EXPECT_EQ(choose_threads(8, 1, 0).threads, 8);  // bound to its own 8 CPUs (srun -c 8)
  EXPECT_EQ(choose_threads(1, 1, 0).threads, 1);  // bound to one core (mpirun --bind-to core)
  EXPECT_EQ(choose_threads(2, 4, 0).threads, 1);  // oversubscribed: still one thread
  EXPECT_EQ(choose_threads(0, 0, 0).threads, 1);  // nonsense in, one thread out
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

TEST(CpuBinding, AtLeastHalfOfTheHostIdleIsAdviceWithTheNumbersAndTheFix) {
  // mpirun -np 2 on a 16-CPU host binds each rank to one core.
  detail::CpuBinding b;
  b.rank = 0, b.host = "node7", b.rank_cpus = 1, b.threads = 1, b.node_ranks = 2, b.node_used = 2;
  b.host_cpus = 16;
  EXPECT_EQ(detail::idle_cpus(b), 14);
  const std::string a = detail::idle_cpus_advice(b);
  EXPECT_TRUE(contains(a, "rank 0 may use 1 of the 16 CPUs of node7 (the launcher's binding)"));
  EXPECT_TRUE(contains(a, "14 CPUs stay idle"));
  EXPECT_TRUE(contains(a, "--bind-to none or --map-by slot:PE=8 gives each of the 2 rank(s) more"));
  EXPECT_TRUE(contains(a, "launch/mpirun-local.sh"));
  // Unknown union: the rank's CPUs times the ranks.
  b.node_used = 0;
  EXPECT_EQ(detail::idle_cpus(b), 14);
  // Half the host in use is not idle enough to speak of; under srun the binding is Slurm's.
  b.node_used = 8;
  EXPECT_EQ(detail::idle_cpus(b), 8);
  b.node_used = 9;
  EXPECT_EQ(detail::idle_cpus_advice(b), "");
  b.node_used = 2, b.srun = true;
  EXPECT_EQ(detail::idle_cpus_advice(b), "");
  // One rank bound to one core of a 2-CPU host (mpirun -np 1): one idle.
  detail::CpuBinding one;
  one.rank_cpus = 1, one.node_ranks = 1, one.node_used = 1, one.host_cpus = 2;
  EXPECT_EQ(detail::idle_cpus(one), 1);
}

TEST(GpuSharing, RanksOnOneGpuEachTakeAHostIdentityAndSockets) {
  // 4 ranks of one host on 1 GPU, the whole job on this host (Note [ranks sharing a GPU]).
  const detail::GpuSharing s = detail::gpu_sharing(2, "h200", 4, 1, /*one_host=*/true);
  const std::map<std::string, std::string> env(s.env.begin(), s.env.end());
  EXPECT_EQ(env.at("NCCL_HOSTID"), "h200.dtrain-rank2");
  EXPECT_EQ(env.at("NCCL_P2P_DISABLE"), "1");
  EXPECT_EQ(env.at("NCCL_SHM_DISABLE"), "1");
  EXPECT_EQ(env.at("NCCL_SOCKET_IFNAME"), "lo");
  EXPECT_EQ(env.at("NCCL_IB_DISABLE"), "1");
  EXPECT_TRUE(contains(s.note, "4 ranks on h200 share 1 GPU(s) through NCCL"));
  EXPECT_TRUE(contains(s.note, "NCCL_HOSTID=h200.dtrain-rank<rank>"));
  EXPECT_TRUE(contains(s.note, "not to measure speed"));
  // Every rank its own identity.
  EXPECT_NE(detail::gpu_sharing(3, "h200", 4, 1, true).env[0].second, s.env[0].second);
  // Ranks on other hosts too: no loopback, the network NCCL would choose.
  const detail::GpuSharing multi = detail::gpu_sharing(0, "n1", 16, 8, /*one_host=*/false);
  const std::map<std::string, std::string> menv(multi.env.begin(), multi.env.end());
  EXPECT_EQ(menv.count("NCCL_SOCKET_IFNAME"), 0u);
  EXPECT_EQ(menv.count("NCCL_IB_DISABLE"), 0u);
  EXPECT_EQ(menv.at("NCCL_HOSTID"), "n1.dtrain-rank0");
  // One rank per GPU (or fewer), or no GPU: nothing is set, nothing said.
  EXPECT_TRUE(detail::gpu_sharing(0, "h", 8, 8, true).env.empty());
  EXPECT_TRUE(detail::gpu_sharing(0, "h", 2, 8, true).note.empty());
  EXPECT_TRUE(detail::gpu_sharing(0, "h", 2, 0, true).env.empty());
}

TEST(CpuBinding, TheHostsCpusAreAtLeastOneAndAtMostTheOnlineOnes) {
  const int n = detail::host_cpus();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GE(n, detail::affinity_cpus());
}

TEST(LaunchCheck, SrunTasksThatDidNotJoinOneMpiJobAreAnError) {
  const Env env = {
      {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "2"}};
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
  EXPECT_EQ(
      launch_error({{"SLURM_STEP_ID", "4294967294"}, {"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "0"}},
                   0, 1, 0),
      "");
  EXPECT_EQ(launch_error({}, 0, 1, 0), "");
}

TEST(LaunchCheck, UnderMpirunOmpiVariablesWinOverInheritedSlurmOnes) {
  // mpirun inside an allocation: the ranks inherit the daemon's SLURM_PROCID, which is not theirs.
  Env env = {{"SLURM_STEP_ID", "0"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_PROCID", "1"},
             {"SLURM_LOCALID", "0"},
             {"OMPI_COMM_WORLD_SIZE", "8"},
             {"OMPI_COMM_WORLD_RANK", "5"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  EXPECT_EQ(launch_error(env, 5, 8, 1), "");
  const std::string e = launch_error(env, 0, 1, 0);
  EXPECT_TRUE(contains(e, "MPI setup is wrong: mpirun started this process as rank 5 of 8"));
  EXPECT_TRUE(contains(e, "MPI sees rank 0 of 1"));
  EXPECT_FALSE(contains(e, "srun"));
}

// --print-config resolves for the launcher's world without MPI: mpirun's OMPI_* win over an
// inherited Slurm step's; an srun task's step count; alone (or numbers that make no sense) 0 of 1.
TEST(LaunchCheck, ThePlaceThatPrintConfigResolvesForIsTheLaunchers) {
  using Env = std::map<std::string, std::string>;
  EXPECT_EQ(detail::launcher_place(Env{}), (std::pair<int, int>{0, 1}));
  EXPECT_EQ(detail::launcher_place(Env{{"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"OMPI_COMM_WORLD_RANK", "3"},
                                       {"SLURM_STEP_ID", "0"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "1"}}),
            (std::pair<int, int>{3, 4}));
  EXPECT_EQ(detail::launcher_place(Env{{"SLURM_STEP_ID", "2"},
                                       {"SLURM_PROCID", "5"},
                                       {"SLURM_STEP_NUM_TASKS", "8"},
                                       {"SLURM_NTASKS", "16"}}),
            (std::pair<int, int>{5, 8}));
  EXPECT_EQ(
      detail::launcher_place(Env{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}}),
      (std::pair<int, int>{0, 1}));
}

TEST(LaunchCheck, AnSrunTaskWithoutAnyPmiIsRefusedBeforeMpiStarts) {
  // srun --mpi=none: the step's variables and no PMIx / PMI ones (what a real srun sets).
  Env env = {{"SLURM_STEP_ID", "0"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_STEP_NUM_TASKS", "2"},
             {"SLURM_PROCID", "1"},
             {"SLURM_LOCALID", "1"}};
  const std::string e = detail::launch_error_before_mpi(env);
  EXPECT_TRUE(contains(e, "srun started this process as task 1 of 2 without PMIx or PMI"));
  EXPECT_TRUE(contains(e, "srun --mpi=pmix"));
  EXPECT_TRUE(contains(e, "DTRAIN_SRUN_ARGS=--mpi=pmix"));
  // A single task without PMI cannot start Open MPI either.
  EXPECT_NE(detail::launch_error_before_mpi(
                {{"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}}),
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

// A failing rank exits without MPI_Abort only where the launcher ends the other ranks on a
// non-zero exit: Open MPI's mpirun, unless orte_abort_on_non_zero_status is off; never srun
// (only --kill-on-bad-exit does, which a task cannot see) nor without a launcher.
TEST(LaunchCheck, OnlyMpirunEndsTheJobWhenARankExits) {
  const Env mpirun = {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}};
  EXPECT_TRUE(detail::launcher_ends_job_on_exit(mpirun));
  for (const char* off : {"0", "false", "FALSE", "no", "off"}) {
    Env with = mpirun;
    with["OMPI_MCA_orte_abort_on_non_zero_status"] = off;
    EXPECT_FALSE(detail::launcher_ends_job_on_exit(with)) << off;
  }
  Env on = mpirun;
  on["OMPI_MCA_orte_abort_on_non_zero_status"] = "1";
  EXPECT_TRUE(detail::launcher_ends_job_on_exit(on));
  EXPECT_FALSE(detail::launcher_ends_job_on_exit(
      {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}));
  EXPECT_FALSE(detail::launcher_ends_job_on_exit({}));
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
  EXPECT_TRUE(
      contains(detail::describe_stall(beats, 0, 5),
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
