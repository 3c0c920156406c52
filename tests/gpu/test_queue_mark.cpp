// QueueMark (Note [data wait]): pending while the GPU still works through what was queued before
// the mark, not once it is done, and never on the CPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "cuda/streams.h"

namespace dtrain::detail {
namespace {

TEST(QueueMark, PendingWhileTheGpuWorksAndNotAfter) {
  const at::Device gpu(at::kCUDA, 0);
  QueueMark mark;
  EXPECT_FALSE(mark.pending());  // nothing recorded yet
  const at::Tensor a = at::randn({8192, 8192}, at::TensorOptions().device(gpu));
  (void)a.sum().item<float>();
  at::Tensor b;
  for (int i = 0; i < 40; ++i) b = a.mm(a);  // about 44 TFLOP: tens of milliseconds
  mark.record(gpu);
  EXPECT_TRUE(mark.pending());
  (void)b.sum().item<float>();  // waits for all of it
  EXPECT_FALSE(mark.pending());

  QueueMark cpu;
  cpu.record(at::Device(at::kCPU));
  EXPECT_FALSE(cpu.pending());
}

}  // namespace
}  // namespace dtrain::detail
