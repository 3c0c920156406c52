// DataWaitClock (Note [data wait]): a wait while the GPU still works through the steps queued
// before it is compute; a wait while the GPU sits idle is data, at most the host's wait; on the
// CPU every wait is data. StepMarks: the steps' intervals on the GPU's clock.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "cuda/streams.h"

namespace dtrain::detail {
namespace {

// Queues tens of milliseconds of matrix products on the current stream; returns their result.
at::Tensor busy_gpu(const at::Tensor& a) {
  at::Tensor b;
  for (int i = 0; i < 40; ++i) b = a.mm(a);  // about 44 TFLOP
  return b;
}

// A step queued and finished, then `idle_ms` with nothing on the GPU before a batch arrives after a
// host wait of `waited` seconds; what the clock then counts as data.
double data_after_idle(DataWaitClock& clock, const at::Tensor& a, int idle_ms, double waited) {
  const at::Device gpu = a.device();
  const at::Tensor b = busy_gpu(a);
  clock.step_queued(gpu);
  (void)b.sum().item<float>();
  std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
  clock.batch_arrived(gpu, waited);
  return clock.settle(true);
}

TEST(DataWait, AWaitTheGpuSpentWorkingIsNotData) {
  const at::Device gpu(at::kCUDA, 0);
  const at::Tensor a = at::randn({8192, 8192}, at::TensorOptions().device(gpu));
  (void)a.sum().item<float>();
  DataWaitClock clock;
  EXPECT_DOUBLE_EQ(clock.settle(true), 0.0);

  // The first batch: no step before it, the whole wait is data.
  clock.batch_arrived(gpu, 0.25);
  EXPECT_DOUBLE_EQ(clock.settle(), 0.25);

  // A step queued (the GPU busy for tens of milliseconds), the next batch after a 0.2 s host
  // wait, the GPU still busy when it arrives: at most a sliver is data.
  const at::Tensor b = busy_gpu(a);
  clock.step_queued(gpu);
  clock.batch_arrived(gpu, 0.2);
  EXPECT_LT(clock.settle(true), 0.002);

  // The GPU runs dry: a step queued and finished, then 0.1 s with nothing to do before the batch
  // arrives after a host wait of 0.05 s (the rest of the idle time was not the loader's).
  EXPECT_DOUBLE_EQ(data_after_idle(clock, a, 100, 0.05), 0.05);

  // Idle for 40 ms after the step, the host waited 0.5 s: about the 40 ms are data.
  const double d = data_after_idle(clock, a, 40, 0.5);
  EXPECT_GT(d, 0.035);
  EXPECT_LT(d, 0.2);

  // Settled once: nothing left.
  EXPECT_DOUBLE_EQ(clock.settle(true), 0.0);
}

TEST(DataWait, WithoutWaitingForTheGpuOnlyThePassedMarksSettle) {
  const at::Device gpu(at::kCUDA, 0);
  const at::Tensor a = at::randn({8192, 8192}, at::TensorOptions().device(gpu));
  (void)a.sum().item<float>();
  DataWaitClock clock;
  const at::Tensor b = busy_gpu(a);
  clock.step_queued(gpu);
  clock.batch_arrived(gpu, 0.3);
  EXPECT_DOUBLE_EQ(clock.settle(), 0.0);  // the GPU has not passed the marks: nothing settled yet
  (void)b.sum().item<float>();
  EXPECT_LT(clock.settle(), 0.002);  // passed now, and settled: the GPU never idled
}

TEST(DataWait, OnTheCpuEveryWaitIsData) {
  const at::Device cpu(at::kCPU);
  DataWaitClock clock;
  clock.step_queued(cpu);
  clock.batch_arrived(cpu, 0.125);
  clock.batch_arrived(cpu, 0.25);
  EXPECT_DOUBLE_EQ(clock.settle(), 0.375);
  EXPECT_DOUBLE_EQ(clock.settle(), 0.0);
}

// StepMarks (dtrain bench's step percentiles): the intervals are the GPU's. Three "steps" of the
// same work queued at once, then 200 ms with the GPU idle and a fourth: the host queues a step in
// a fraction of the time the GPU takes for it; the fourth interval holds the idle time too.
TEST(StepMarks, IntervalsAreTheGpusTimeBetweenTheSteps) {
  const at::Device gpu(at::kCUDA, 0);
  const at::Tensor a = at::randn({8192, 8192}, at::TensorOptions().device(gpu));
  (void)a.sum().item<float>();
  StepMarks marks;
  marks.mark(gpu);
  at::Tensor b;
  for (int step = 0; step < 3; ++step) {
    b = busy_gpu(a);
    marks.mark(gpu);
  }
  (void)b.sum().item<float>();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto queued = std::chrono::steady_clock::now();
  b = busy_gpu(a);
  marks.mark(gpu);
  const double host =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count();
  const std::vector<double> s = marks.intervals();
  ASSERT_EQ(s.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_GT(s[static_cast<size_t>(i)], 0.005) << "step " << i;
  // Each of the first three within a fifth of their mean: the same work.
  const double mean = (s[0] + s[1] + s[2]) / 3;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(s[static_cast<size_t>(i)], mean, 0.2 * mean);
  EXPECT_GT(s[3], s[1] + 0.1);  // the 200 ms idle before the fourth are in its interval
  EXPECT_LT(host, 0.5 * s[1]);  // the host queued the fourth step in a fraction of its GPU time
  EXPECT_TRUE(marks.intervals().empty());  // forgotten
}

TEST(StepMarks, OnTheCpuNothingIsMarked) {
  StepMarks marks;
  marks.mark(at::Device(at::kCPU));
  marks.mark(at::Device(at::kCPU));
  EXPECT_TRUE(marks.intervals().empty());
}

}  // namespace
}  // namespace dtrain::detail
