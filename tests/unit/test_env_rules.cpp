// The rules behind `dtrain env`: its hints (what stops training, what is advice), the launcher's
// name and advice, the device a rank binds, and CPU lists as taskset writes them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cli/env_hints.h"
#include "runtime/binding.h"
#include "runtime/launch_check.h"
#include "runtime/threads.h"

namespace dtrain::cli {
namespace {

using Env = std::map<std::string, std::string>;

// A CPU build on a machine without GPUs, one rank alone: nothing to say.
MachineFacts cpu_machine() {
  MachineFacts m;
  m.nvml_reason =
      "NVML not found (libnvidia-ml.so.1: cannot open shared object file): no GPU statistics";
  return m;
}

// A CUDA 12.4 build on a driver for CUDA 12.5 with `gpus` GPUs, all visible to CUDA.
MachineFacts gpu_machine(int gpus) {
  MachineFacts m;
  m.cuda_build = true;
  m.cuda.runtime_compiled = m.cuda.runtime = 12040;
  m.cuda.driver = m.nvml_cuda_driver = 12050;
  m.nvml_ok = true;
  m.driver = "555.42.06";
  m.cuda_devices = gpus;
  for (int i = 0; i < gpus; ++i) {
    GpuFacts g;
    g.nvml_index = g.cuda_index = i;
    m.gpus.push_back(g);
  }
  return m;
}

RankFacts rank(const std::string& device, int local_world = 1) {
  RankFacts r;
  r.device = device;
  r.local_world = r.world = local_world;
  r.host = "node7";
  return r;
}

std::string all(const std::vector<Hint>& hints) {
  std::string s;
  for (const Hint& h : hints) s += (h.stops ? "STOP: " : "ADVICE: ") + h.text + "\n";
  return s;
}

bool any_stops(const std::vector<Hint>& hints) {
  for (const Hint& h : hints)
    if (h.stops) return true;
  return false;
}

TEST(EnvHints, AHealthyMachineHasNone) {
  EXPECT_TRUE(env_hints(cpu_machine(), rank("cpu"), DeviceKind::kAuto).empty());
  EXPECT_TRUE(env_hints(cpu_machine(), rank("cpu"), DeviceKind::kCpu).empty());
  EXPECT_TRUE(env_hints(gpu_machine(8), rank("cuda:0", 8), DeviceKind::kAuto).empty());
}

TEST(EnvHints, ACpuOnlyLibTorchOnAMachineWithGpus) {
  MachineFacts m = gpu_machine(0);
  m.cuda_build = false;
  m.cuda = {};
  m.gpus.resize(2);
  auto h = env_hints(m, rank("cpu"), DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_FALSE(h[0].stops);
  EXPECT_NE(h[0].text.find("NVML sees 2 GPU(s) but this dtrain was built with a CPU-only LibTorch"),
            std::string::npos)
      << h[0].text;
  // Asked for CUDA, it cannot train at all.
  h = env_hints(m, rank("cpu"), DeviceKind::kCuda);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_TRUE(h[0].stops);
  EXPECT_EQ(h[0].text,
            "run.device is cuda but no CUDA device is visible (this dtrain was built "
            "with a CPU-only LibTorch)");
}

TEST(EnvHints, NoGpuWhileRunDeviceWantsOne) {
  auto h = env_hints(cpu_machine(), rank("cpu"), DeviceKind::kCuda);
  ASSERT_TRUE(any_stops(h)) << all(h);
  // A CUDA build whose GPUs CUDA_VISIBLE_DEVICES hides.
  MachineFacts m = gpu_machine(0);
  m.gpus.resize(4);
  m.cuda_visible_devices = "";
  h = env_hints(m, rank("cpu"), DeviceKind::kCuda);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_TRUE(h[0].stops);
  EXPECT_EQ(h[0].text,
            "run.device is cuda but no CUDA device is visible (NVML sees 4 GPU(s) "
            "(CUDA_VISIBLE_DEVICES='' hides the others))");
  // run.device auto: it trains on the CPU, and says so.
  h = env_hints(m, rank("cpu"), DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_FALSE(h[0].stops);
  EXPECT_NE(h[0].text.find("NVML sees 4 GPU(s) but CUDA none"), std::string::npos) << h[0].text;
  // run.device cpu: nothing to say.
  EXPECT_TRUE(env_hints(m, rank("cpu"), DeviceKind::kCpu).empty());
}

TEST(EnvHints, MoreRanksOnANodeThanGpusIsAdvice) {
  auto h = env_hints(gpu_machine(2), rank("cuda:0", 4), DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_FALSE(h[0].stops);
  EXPECT_NE(h[0].text.find("4 ranks on node7 share 2 GPU(s)"), std::string::npos) << h[0].text;
  EXPECT_TRUE(env_hints(gpu_machine(2), rank("cuda:0", 2), DeviceKind::kAuto).empty());
  EXPECT_TRUE(env_hints(gpu_machine(2), rank("cpu", 4), DeviceKind::kCpu).empty());
}

TEST(EnvHints, ADriverOlderThanTheRuntime) {
  MachineFacts m = gpu_machine(1);
  m.cuda.driver = m.nvml_cuda_driver = 11080;  // 11.8 driver, 12.4 runtime: CUDA cannot start
  auto h = env_hints(m, rank("cuda:0"), DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_TRUE(h[0].stops);
  EXPECT_NE(h[0].text.find("the NVIDIA driver 555.42.06 supports CUDA up to 11.8, older than this "
                           "dtrain's CUDA runtime 12.4: CUDA cannot start"),
            std::string::npos)
      << h[0].text;
  m.cuda.driver = m.nvml_cuda_driver = 12020;  // 12.2 driver, 12.4 runtime: minor version compat
  h = env_hints(m, rank("cuda:0"), DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_FALSE(h[0].stops);
  EXPECT_NE(h[0].text.find("minor version compatibility"), std::string::npos) << h[0].text;
  // cudaDriverGetVersion unknown: NVML's number decides.
  m.cuda.driver = 0;
  m.nvml_cuda_driver = 11040;
  EXPECT_TRUE(any_stops(env_hints(m, rank("cuda:0"), DeviceKind::kAuto)));
}

TEST(EnvHints, TheLaunchersNumbersAgainstMpis) {
  RankFacts r = rank("cpu");
  r.launch_error = "the MPI/PMI setup is wrong: srun started this process as task 0 of 2";
  r.launch_advice = "Slurm's job has 2 tasks";
  auto h = env_hints(cpu_machine(), r, DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 2u) << all(h);
  EXPECT_TRUE(h[0].stops);
  EXPECT_EQ(h[0].text, r.launch_error);
  EXPECT_FALSE(h[1].stops);
  EXPECT_EQ(h[1].text, r.launch_advice);
}

// The config's data.path must be a folder on the rank's host for a format that reads files: else
// an error naming data.path, which stops training; synthetic data reads none.
TEST(EnvHints, AMissingDataFolderStopsNamingDataPath) {
  DataConfig data;
  data.format = DataFormat::kIdx;
  data.path = "/no/such/dtrain/data";
  const std::string problem = data_problem(data);
  EXPECT_EQ(problem.rfind("data.path: no such folder: /no/such/dtrain/data", 0), 0u) << problem;
  data.path = "/";
  EXPECT_EQ(data_problem(data), "");
  data.format = DataFormat::kSynthetic;
  data.path = "/no/such/dtrain/data";
  EXPECT_EQ(data_problem(data), "");

  RankFacts r = rank("cpu");
  r.data_problem = problem;
  auto h = env_hints(cpu_machine(), r, DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_TRUE(h[0].stops);
  EXPECT_EQ(h[0].text, problem);
}

TEST(EnvHints, NoNvmlOnAGpuRankIsAdvice) {
  MachineFacts m = gpu_machine(1);
  m.nvml_ok = false;
  m.nvml_reason = "NVML not found (libnvidia-ml.so.1: x): no GPU statistics";
  auto h = env_hints(m, rank("cuda:0"), DeviceKind::kAuto);
  ASSERT_EQ(h.size(), 1u) << all(h);
  EXPECT_FALSE(h[0].stops);
  EXPECT_EQ(h[0].text.rfind(m.nvml_reason, 0), 0u) << h[0].text;
}

TEST(EnvHints, RanksBoundToFewCpusOfABigHostIsAdvice) {
  // mpirun -np 2 on a 16-CPU host binds each rank to one core: 14 CPUs idle.
  MachineFacts m = gpu_machine(1);
  m.online_cpus = 16;
  RankFacts r = rank("cuda:0", 2);
  r.cpu_count = 1, r.threads = 1;
  const std::string text = all(env_hints(m, r, DeviceKind::kAuto));
  EXPECT_NE(text.find("may use 1 of the 16 CPUs of node7"), std::string::npos) << text;
  EXPECT_NE(text.find("14 CPUs stay idle"), std::string::npos) << text;
  EXPECT_NE(text.find("--bind-to none"), std::string::npos) << text;
  // Each rank with half the host, or a rank alone with every CPU: nothing to say.
  r.cpu_count = 8;
  EXPECT_EQ(all(env_hints(m, r, DeviceKind::kAuto)).find("CPUs stay idle"), std::string::npos);
  RankFacts alone = rank("cuda:0", 1);
  alone.cpu_count = 16;
  EXPECT_EQ(all(env_hints(m, alone, DeviceKind::kAuto)).find("CPUs stay idle"), std::string::npos);
}

TEST(LaunchRules, TheLauncherByItsVariables) {
  EXPECT_EQ(detail::launcher_name({}), "none");
  EXPECT_EQ(detail::launcher_name({{"OMPI_COMM_WORLD_SIZE", "2"}}), "mpirun");
  EXPECT_EQ(detail::launcher_name({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}}), "srun");
  // A batch script (no step of srun: Slurm's batch step id is 0xfffffffb).
  EXPECT_EQ(detail::launcher_name({{"SLURM_STEP_ID", "4294967291"}, {"SLURM_PROCID", "0"}}),
            "none");
  EXPECT_EQ(detail::launcher_name({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), "none");
  // mpirun inside an allocation: Open MPI's variables win.
  EXPECT_EQ(detail::launcher_name(
                {{"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}}),
            "mpirun");
}

TEST(LaunchRules, ABatchScriptThatDidNotUseSrunIsAdvice) {
  const Env batch = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}};
  const std::string a = detail::launch_advice(batch, 1);
  EXPECT_NE(a.find("Slurm's job has 4 tasks (SLURM_NTASKS)"), std::string::npos) << a;
  EXPECT_NE(a.find("srun"), std::string::npos) << a;
  EXPECT_EQ(detail::launch_advice(batch, 4), "");  // MPI sees the whole job
  EXPECT_EQ(detail::launch_advice({{"SLURM_NTASKS", "1"}}, 1), "");
  EXPECT_EQ(detail::launch_advice({}, 1), "");
  // An srun task is the launch check's business (an error there), not advice.
  EXPECT_EQ(detail::launch_advice(
                {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, 1),
            "");
}

TEST(Binding, RanksOfANodeTakeTheGpusInTurn) {
  EXPECT_EQ(detail::device_for_rank(DeviceKind::kAuto, 0, 0), -1);
  EXPECT_EQ(detail::device_for_rank(DeviceKind::kAuto, 3, 8), 3);
  EXPECT_EQ(detail::device_for_rank(DeviceKind::kCuda, 5, 4), 1);
  EXPECT_EQ(detail::device_for_rank(DeviceKind::kCpu, 0, 8), -1);
}

TEST(Binding, TheStartUpNamesEveryRanksHostWithItsRanks) {
  EXPECT_EQ(detail::hosts_of_ranks({"n1"}), "1 host: n1 (rank 0)");
  EXPECT_EQ(detail::hosts_of_ranks({"n1", "n1", "n2", "n2"}),
            "2 hosts: n1 (ranks 0-1), n2 (ranks 2-3)");
  // Round-robin placement: each host's ranks as they come, in the order of their first rank.
  EXPECT_EQ(detail::hosts_of_ranks({"b", "a", "b", "a", "c"}),
            "3 hosts: b (ranks 0, 2), a (ranks 1, 3), c (rank 4)");
  EXPECT_EQ(detail::hosts_of_ranks({"x", "x", "x"}), "1 host: x (ranks 0-2)");
  EXPECT_EQ(detail::hosts_of_ranks({"a", "b", "c"}, 2),
            "3 hosts: a (rank 0), b (rank 1) ... and 1 more host");
}

TEST(Binding, CpuListsAsTasksetWritesThem) {
  EXPECT_EQ(detail::cpu_list_text({}), "");
  EXPECT_EQ(detail::cpu_list_text({0}), "0");
  EXPECT_EQ(detail::cpu_list_text({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(detail::cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(detail::cpu_list_text({1, 3, 5}), "1,3,5");
  // This process's mask is not empty and agrees with the count threads.cpp uses.
  const auto mine = detail::affinity_cpu_list();
  EXPECT_FALSE(mine.empty());
  EXPECT_EQ(static_cast<int>(mine.size()), detail::affinity_cpus());
}

}  // namespace
}  // namespace dtrain::cli
