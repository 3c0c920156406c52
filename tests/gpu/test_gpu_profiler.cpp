// The gpu tier: the profiler window records the asked steps with their GPU kernels.
#include "gpu_support.h"

namespace dtrain::test {
namespace {

// ---- profiler: a Chrome trace of the recorded steps with their GPU kernels ----------------------
TEST(Gpu, ProfilerRecordsKernelsOfTheAskedSteps) {
  char dir[] = "/tmp/dtrain-gpu-prof-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (const char* mode : {"off", "on"}) {
    // A run directory each: a second run of one would resume the first's final checkpoint.
    TrainRun r = train(
        kMlp,
        {std::string("run.dir=") + dir, std::string("run.name=p_") + mode, "run.profile_start=4",
         "run.profile_steps=3", std::string("train.cuda_graph=") + mode},
        kGpu);
    EXPECT_NE(r.summary.profile.find("kernels"), std::string::npos) << r.summary.profile;
    const detail::ProfileSummary ps =
        detail::summarize_trace(std::string(dir) + "/p_" + mode + "/trace.rank0.json");
    EXPECT_EQ(ps.steps, 3) << mode;
    EXPECT_GT(ps.kernels_per_step, 3) << mode << "\n" << ps.table;
    EXPECT_GT(ps.gpu_busy, 0.0) << mode;
    std::printf("cuda_graph=%s: %s", mode, ps.table.c_str());
  }
}

}  // namespace
}  // namespace dtrain::test
