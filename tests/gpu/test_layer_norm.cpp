// The fused residual + LayerNorm kernels (Note [fused residual LayerNorm]) against LibTorch's
// unfused ops computed in fp32: outputs and the gradients of x, r, weight and bias, for every
// residual dtype and output dtype (autocast off, bf16, fp16), widths that do and do not fill a
// warp; and GPT trained on the GPU in fp32 (through the fused kernels) against the CPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "cuda/fused_norm.h"
#include "dtrain/amp.h"
#include "dtrain/config.h"
#include "tensor_compare.h"

namespace dtrain::detail {
namespace {

using test::kGpu;
using test::max_rel;

struct LayerNormCase {
  int64_t width;
  at::ScalarType residual;  // Undefined: no residual
  Precision autocast;
};

void check_layer_norm(const LayerNormCase& k) {
  const std::string name =
      "C=" + std::to_string(k.width) +
      " r=" + (k.residual == at::ScalarType::Undefined ? "none" : at::toString(k.residual)) +
      " autocast=" + to_string(k.autocast);
  SCOPED_TRACE(name);
  at::manual_seed(7);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const std::vector<int64_t> shape = {3, 37, k.width};
  const at::Tensor x0 = at::randn(shape, f32).mul(2).add(0.5);
  const at::Tensor w0 = at::randn({k.width}, f32).mul(0.3).add(1);
  const at::Tensor b0 = at::randn({k.width}, f32).mul(0.1);
  const bool residual = k.residual != at::ScalarType::Undefined;
  const at::Tensor r0 = residual ? at::randn(shape, f32).to(k.residual) : at::Tensor();
  const at::ScalarType y_type = k.autocast == Precision::kBf16   ? at::kBFloat16
                                : k.autocast == Precision::kFp16 ? at::kHalf
                                                                 : at::kFloat;
  const at::Tensor gy = at::randn(shape, f32), gs = at::randn(shape, f32);

  // Returns {s, y, dx, dr, dw, db}.
  auto run = [&](bool fused) {
    at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::Tensor b = b0.clone().requires_grad_(true);
    at::Tensor r = residual ? r0.clone().requires_grad_(true) : at::Tensor();
    at::Tensor s, y;
    if (fused) {
      AutocastGuard autocast(kGpu, k.autocast);
      EXPECT_TRUE(fused_layer_norm_applies(x, r, w, b));
      std::tie(s, y) = fused_residual_layer_norm(x, r, w, b, 1e-5);
    } else {
      s = residual ? x + r.to(at::kFloat) : x;
      y = at::layer_norm(s, {k.width}, w, b, 1e-5).to(y_type);
    }
    EXPECT_EQ(y.scalar_type(), y_type);
    at::Tensor loss = (y.to(at::kFloat) * gy).sum();
    if (residual) loss = loss + (s * gs).sum();
    std::vector<at::Tensor> inputs = {x, w, b};
    if (residual) inputs.push_back(r);
    const auto g = torch::autograd::grad({loss}, inputs);
    return std::vector<at::Tensor>{s.detach(), y.detach(), g[0], residual ? g[3] : at::Tensor(),
                                   g[1],       g[2]};
  };
  const auto got = run(true), want = run(false);
  const double y_tol = y_type == at::kFloat ? 1e-5 : y_type == at::kHalf ? 2e-3 : 1e-2;
  if (residual) {
    EXPECT_LT(max_rel(got[0], want[0]), 1e-6) << "s";
    EXPECT_EQ(got[3].scalar_type(), k.residual);
    const double r_tol = k.residual == at::kFloat ? 1e-4 : k.residual == at::kHalf ? 2e-3 : 1e-2;
    EXPECT_LT(max_rel(got[3], want[3]), r_tol) << "dr";
  }
  EXPECT_LT(max_rel(got[1], want[1]), y_tol) << "y";
  EXPECT_LT(max_rel(got[2], want[2]), 1e-4) << "dx";
  EXPECT_LT(max_rel(got[4], want[4]), 1e-4) << "dw";
  EXPECT_LT(max_rel(got[5], want[5]), 1e-4) << "db";
  // Deterministic: the same inputs give bit-identical gradients.
  const auto again = run(true);
  EXPECT_TRUE(again[4].equal(got[4]) && again[5].equal(got[5]) && again[2].equal(got[2]));
}

TEST(FusedLayerNorm, MatchesLibTorchForwardAndGradients) {
  for (int64_t width : {768, 1024, 384, 100, 2})  // the first three: the register kernels
    for (auto residual : {at::ScalarType::Undefined, at::kFloat, at::kBFloat16, at::kHalf})
      for (auto autocast : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
        check_layer_norm({width, residual, autocast});
}

TEST(FusedLayerNorm, ManyRowsAndAWideRow) {
  // More rows than the backward's 512 blocks x 8 warps, and a width of 6144 (one warp a block).
  check_layer_norm({64, at::kBFloat16, Precision::kBf16});
  at::manual_seed(1);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  for (const auto& shape : {std::vector<int64_t>{5000, 64}, std::vector<int64_t>{9, 6144}}) {
    const int64_t c = shape.back();
    at::Tensor x = at::randn(shape, f32).requires_grad_(true);
    at::Tensor r = at::randn(shape, f32).to(at::kBFloat16).requires_grad_(true);
    at::Tensor w = at::ones({c}, f32).requires_grad_(true),
               b = at::zeros({c}, f32).requires_grad_(true);
    ASSERT_TRUE(fused_layer_norm_applies(x, r, w, b));
    auto [s, y] = fused_residual_layer_norm(x, r, w, b, 1e-5);
    const at::Tensor gy = at::randn(shape, f32);
    const auto g = torch::autograd::grad({(y * gy).sum()}, {w, b});
    const at::Tensor sr = x.detach() + r.detach().to(at::kFloat);
    const at::Tensor xhat = (sr - sr.mean(-1, true)) / (sr.var(-1, false, true) + 1e-5).sqrt();
    EXPECT_LT(max_rel(g[0], (gy * xhat).sum(0)), 1e-4) << shape[0];
    EXPECT_LT(max_rel(g[1], gy.sum(0)), 1e-4) << shape[0];
  }
  // Too wide, non-contiguous, or on the CPU: LibTorch's ops instead.
  const at::Tensor wide = at::zeros({2, 6145}, f32), v = at::zeros({6145}, f32);
  EXPECT_FALSE(fused_layer_norm_applies(wide, at::Tensor(), v, v));
  const at::Tensor t = at::zeros({8, 4}, f32).t(), v4 = at::zeros({8}, f32);
  EXPECT_FALSE(fused_layer_norm_applies(t, at::Tensor(), v4, v4));
  EXPECT_FALSE(
      fused_layer_norm_applies(at::zeros({2, 8}), at::Tensor(), at::zeros({8}), at::zeros({8})));
}

}  // namespace
}  // namespace dtrain::detail
