// The profiler window (run.profile_steps): every rank records exactly the asked steps into its
// own Chrome trace, and training around it is unchanged. A LibTorch without Kineto (Debian's
// 1.13) cannot write traces: there it must be a clear error naming the key, before training.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "dtrain/trainer.h"
#include "telemetry/profiler.h"

namespace dtrain {
namespace {

const char* kProfileCfg = R"(
run: {seed: 1, log_every: 0, threads: 1, name: prof}
model: {name: mlp, hidden: [16]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 512,
       synthetic_test_size: 0, synthetic_features: 8, synthetic_classes: 3, workers: 1}
train: {epochs: 1, max_steps: 10, global_batch: 32, optimizer: adam, lr: 0.01, eval: false}
)";

TEST(Profiler, RecordsExactlyTheAskedStepsOnEveryRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // One folder for all ranks (rank 0's name, broadcast).
  char dir[64] = "/tmp/dtrain-prof-XXXXXX";
  if (rank == 0) {
    ASSERT_NE(mkdtemp(dir), nullptr);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

  test::RunSetup run =
      test::setup_run(kProfileCfg, "profiler",
                      {std::string("run.dir=") + dir, "run.profile_start=4", "run.profile_steps=3"},
                      MPI_COMM_WORLD);
  TrainSummary s;
  try {
    Trainer trainer(run.cfg, *run.comm, *run.comm, at::kCPU, run.model, run.data.train,
                    run.data.test);
    s = trainer.fit();
  } catch (const Error& e) {
    // Only acceptable reason: this LibTorch has no Kineto; the message says so and names the key.
    const std::string what = e.what();
    EXPECT_NE(what.find("run.profile_steps"), std::string::npos) << what;
    EXPECT_NE(what.find("Kineto"), std::string::npos) << what;
    std::printf("[rank %d] profiler unavailable in this LibTorch, as reported: %s\n", rank,
                what.c_str());
    return;
  }
  EXPECT_EQ(s.steps, 10);  // the window does not change how many steps run
  const std::string trace = std::string(dir) + "/prof/trace.rank" + std::to_string(rank) + ".json";
  ASSERT_TRUE(std::ifstream(trace).good()) << trace;
  const detail::ProfileSummary ps = detail::summarize_trace(trace);
  EXPECT_EQ(ps.steps, 3) << ps.table;
  EXPECT_GT(ps.wall_ms_per_step, 0.0);
  EXPECT_EQ(ps.kernels_per_step, 0.0);  // CPU run: no GPU kernels
  if (rank == 0) {
    EXPECT_NE(s.profile.find(trace), std::string::npos) << s.profile;
  }
}

TEST(Profiler, SummaryOfAHandMadeTrace) {
  // Two steps of 100 us; kernels on two streams overlap: busy = [10,60] + [70,90] + [120,180]
  // = 50 + 20 + 60 = 130 us of a 200 us window; one sync inside the steps, one after.
  char path[] = "/tmp/dtrain-trace-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << R"JSON({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "dtrain_step", "ts": 0, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "dtrain_step", "ts": 100, "dur": 100},
    {"ph": "X", "cat": "kernel", "name": "gemm<float, 128>(int)", "ts": 10, "dur": 40},
    {"ph": "X", "cat": "kernel", "name": "relu", "ts": 30, "dur": 30},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 70, "dur": 20},
    {"ph": "X", "cat": "kernel", "name": "gemm<half, 64>(int)", "ts": 120, "dur": 60},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 95, "dur": 20},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 250, "dur": 1},
    {"ph": "X", "cat": "kernel", "name": "late", "ts": 300, "dur": 5}
  ]})JSON";
  const detail::ProfileSummary ps = detail::summarize_trace(path);
  std::remove(path);
  EXPECT_EQ(ps.steps, 2);
  EXPECT_DOUBLE_EQ(ps.wall_ms_per_step, 0.1);
  EXPECT_DOUBLE_EQ(ps.gpu_busy, 130.0 / 200.0);
  EXPECT_DOUBLE_EQ(ps.kernel_ms_per_step, (40 + 30 + 60) / 1e3 / 2);
  EXPECT_DOUBLE_EQ(ps.kernels_per_step, 1.5);
  EXPECT_DOUBLE_EQ(ps.syncs_per_step, 0.5);
  // Both gemms group under one name without their template arguments.
  EXPECT_NE(ps.table.find("gemm\n"), std::string::npos) << ps.table;
}

}  // namespace
}  // namespace dtrain
