// dtrain's CUDA Linear (Note [Linear bias gradient]) against at::linear: the output and the
// input and weight gradients (the same GEMMs), and the bias gradient against the sum of the
// output gradient in double, for fp32 and bf16/fp16 autocast, vectorized and scalar widths, 2-d
// and 3-d inputs, a single row and many.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "cuda/fused_linear.h"
#include "dtrain/amp.h"
#include "dtrain/config.h"
#include "tensor_compare.h"

namespace dtrain::detail {
namespace {

using test::kGpu;
using test::max_rel;

void check_linear(const std::vector<int64_t>& in_shape, int64_t out, Precision precision) {
  SCOPED_TRACE("x " + std::to_string(in_shape.size()) + "-d, " + std::to_string(in_shape[0]) +
               " rows, in " + std::to_string(in_shape.back()) + ", out " + std::to_string(out) +
               ", " + to_string(precision));
  at::manual_seed(3);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const int64_t in = in_shape.back();
  const at::Tensor x0 = at::randn(in_shape, f32), w0 = at::randn({out, in}, f32).mul(0.1);
  const at::Tensor b0 = at::randn({out}, f32);
  std::vector<int64_t> out_shape = in_shape;
  out_shape.back() = out;
  const at::Tensor gy = at::randn(out_shape, f32);
  auto run = [&](bool fused) {
    at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::Tensor b = b0.clone().requires_grad_(true);
    at::Tensor y;
    {
      AutocastGuard autocast(kGpu, precision);
      if (fused) {
        EXPECT_TRUE(fused_linear_applies(x, w, b));
      }
      y = fused ? fused_linear(x, w, b) : at::linear(x, w, b);
    }
    const auto g = torch::autograd::grad({(y.to(at::kFloat) * gy).sum()}, {x, w, b});
    return std::vector<at::Tensor>{y.detach(), g[0], g[1], g[2]};
  };
  const auto got = run(true), want = run(false);
  EXPECT_EQ(got[0].scalar_type(), want[0].scalar_type());
  const double tol = precision == Precision::kFp32 ? 1e-5 : 1e-2;
  EXPECT_LT(max_rel(got[0], want[0]), tol) << "y";
  EXPECT_LT(max_rel(got[1], want[1]), tol) << "dx";
  EXPECT_LT(max_rel(got[2], want[2]), tol) << "dw";
  EXPECT_EQ(got[3].scalar_type(), at::kFloat);
  // The bias gradient is the sum of the output gradient (in the compute dtype) over the rows.
  const at::ScalarType dt = precision == Precision::kBf16   ? at::kBFloat16
                            : precision == Precision::kFp16 ? at::kHalf
                                                            : at::kFloat;
  const at::Tensor want_db = gy.to(dt).to(at::kDouble).reshape({-1, out}).sum(0);
  EXPECT_LT(max_rel(got[3], want_db), 1e-5) << "db";
  EXPECT_TRUE(run(true)[3].equal(got[3])) << "deterministic";
}

TEST(FusedLinear, MatchesAtLinear) {
  for (auto p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    check_linear({2, 64, 48}, 96, p);     // 3-d, vectorized widths
    check_linear({1, 32}, 100, p);        // one row; 100 columns: the scalar path for 16-bit types
    check_linear({5000, 24}, 8, p);       // many rows, few columns
    check_linear({300, 16}, 3 * 256, p);  // several column tiles
  }
}

TEST(FusedLinear, RefusesWhatItDoesNotHandle) {
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const at::Tensor w = at::zeros({4, 8}, f32), b = at::zeros({4}, f32);
  EXPECT_TRUE(fused_linear_applies(at::zeros({2, 8}, f32), w, b));
  EXPECT_FALSE(fused_linear_applies(at::zeros({2, 8}), w.cpu(), b.cpu()));      // CPU
  EXPECT_FALSE(fused_linear_applies(at::zeros({2, 7}, f32), w, b));             // width
  EXPECT_FALSE(fused_linear_applies(at::zeros({2, 8}, f32), w, at::Tensor()));  // no bias
  EXPECT_FALSE(fused_linear_applies(at::zeros({0, 8}, f32), w, b));             // empty
}

}  // namespace
}  // namespace dtrain::detail
