// Gradient scaler against PyTorch's algorithm (torch.cuda.amp.GradScaler / _amp_update_scale_):
// defaults 65536, growth 2 after 2000 clean steps, backoff 0.5 on inf/NaN with the step skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dtrain/amp.h"

namespace dtrain {
namespace {

at::Tensor param_with_grad(std::vector<float> g) {
  at::Tensor p = at::zeros({static_cast<int64_t>(g.size())}).requires_grad_(true);
  p.mutable_grad() = at::tensor(g);
  return p;
}

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler s(at::kCPU);
  EXPECT_DOUBLE_EQ(s.current_scale(), 65536.0);
  EXPECT_DOUBLE_EQ(s.scale(at::ones({})).item<double>(), 65536.0);
}

TEST(GradScaler, UnscalesOnceExactly) {
  GradScaler s(at::kCPU);
  at::Tensor p = param_with_grad({65536.f, -131072.f, 32768.f});
  s.unscale({p});
  EXPECT_FALSE(s.found_inf());
  EXPECT_TRUE(p.grad().equal(at::tensor({1.f, -2.f, 0.5f})));
}

TEST(GradScaler, InfSkipsAndBacksOff) {
  GradScaler s(at::kCPU);
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const double before = s.current_scale();
    at::Tensor p = param_with_grad({1.f, bad});
    s.unscale({p});
    EXPECT_TRUE(s.found_inf());
    s.update();
    EXPECT_DOUBLE_EQ(s.current_scale(), before * 0.5);
    EXPECT_EQ(s.growth_tracker(), 0);
  }
}

TEST(GradScaler, GrowsAfterIntervalOfCleanSteps) {
  ScalerOptions o;
  o.growth_interval = 5;
  GradScaler s(at::kCPU, o);
  for (int i = 1; i <= 4; ++i) {
    at::Tensor p = param_with_grad({1.f});
    s.unscale({p});
    s.update();
    EXPECT_EQ(s.growth_tracker(), i);
    EXPECT_DOUBLE_EQ(s.current_scale(), 65536.0);
  }
  at::Tensor p = param_with_grad({1.f});
  s.unscale({p});
  s.update();
  EXPECT_DOUBLE_EQ(s.current_scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  // An inf in the middle of a run resets the count.
  at::Tensor bad = param_with_grad({std::numeric_limits<float>::infinity()});
  s.unscale({bad});
  s.update();
  EXPECT_DOUBLE_EQ(s.current_scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, DefaultIntervalIs2000) {
  GradScaler s(at::kCPU);
  for (int i = 0; i < 1999; ++i) {
    at::Tensor p = param_with_grad({1.f});
    s.unscale({p});
    s.update();
  }
  EXPECT_DOUBLE_EQ(s.current_scale(), 65536.0);
  at::Tensor p = param_with_grad({1.f});
  s.unscale({p});
  s.update();
  EXPECT_DOUBLE_EQ(s.current_scale(), 131072.0);
}

TEST(Autocast, Bf16OnCpuComputesInBf16AndRestores) {
  at::Tensor a = at::randn({8, 8}), b = at::randn({8, 8});
  {
    AutocastGuard g(at::kCPU, Precision::kBf16);
    ASSERT_TRUE(g.active());
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  AutocastGuard off(at::kCPU, Precision::kFp32);
  EXPECT_FALSE(off.active());
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
}

// bf16 on a CPU without bf16 instructions is named, with the key and the way out; where the
// CPU has them, and for fp32, fp16 and CUDA, nothing is said.
TEST(Autocast, Bf16OnACpuWithoutBf16InstructionsIsNamed) {
  const bool native = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  const std::string said = autocast_slowdown(at::kCPU, Precision::kBf16);
  if (native) {
    EXPECT_EQ(said, "");
  } else {
    EXPECT_NE(said.find("train.precision=fp32"), std::string::npos) << said;
    EXPECT_NE(said.find("AVX512-BF16"), std::string::npos) << said;
  }
  EXPECT_EQ(autocast_slowdown(at::kCPU, Precision::kFp32), "");
  EXPECT_EQ(autocast_slowdown(at::Device(at::kCUDA, 0), Precision::kBf16), "");
}

}  // namespace
}  // namespace dtrain
