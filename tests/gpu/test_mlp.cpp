// dtrain's fused GPT MLP (Note [MLP GEMM epilogues]) against LibTorch's ops: at::linear, at::gelu
// (tanh) and at::linear under the same autocast; the output and all five gradients, for bf16 and
// fp16, 2-d and 3-d inputs, a single row and many.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "cuda/fused_mlp.h"
#include "dtrain/amp.h"
#include "dtrain/config.h"
#include "tensor_compare.h"

namespace dtrain::detail {
namespace {

using test::kGpu;
using test::max_rel;

void check_mlp(const std::vector<int64_t>& in_shape, int64_t hidden, Precision precision) {
  SCOPED_TRACE("x " + std::to_string(in_shape.size()) + "-d, " + std::to_string(in_shape[0]) +
               " rows, width " + std::to_string(in_shape.back()) + ", hidden " +
               std::to_string(hidden) + ", " + to_string(precision));
  at::manual_seed(5);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const int64_t c = in_shape.back();
  const at::Tensor x0 = at::randn(in_shape, f32);
  const at::Tensor fw0 = at::randn({hidden, c}, f32).mul(0.2), fb0 = at::randn({hidden}, f32);
  const at::Tensor pw0 = at::randn({c, hidden}, f32).mul(0.1), pb0 = at::randn({c}, f32);
  const at::Tensor gy = at::randn(in_shape, f32);
  auto run = [&](bool fused) {
    std::vector<at::Tensor> p;
    for (const at::Tensor* t : {&x0, &fw0, &fb0, &pw0, &pb0})
      p.push_back(t->clone().requires_grad_(true));
    at::Tensor y;
    {
      AutocastGuard autocast(kGpu, precision);
      if (fused) {
        EXPECT_TRUE(fused_mlp_applies(p[0], p[1], p[2], p[3], p[4]));
      }
      y = fused ? fused_mlp(p[0], p[1], p[2], p[3], p[4])
                : at::linear(at::gelu(at::linear(p[0], p[1], p[2]), "tanh"), p[3], p[4]);
    }
    std::vector<at::Tensor> out{y.detach()};
    for (const at::Tensor& g : torch::autograd::grad({(y.to(at::kFloat) * gy).sum()}, p))
      out.push_back(g);
    return out;
  };
  const auto got = run(true), want = run(false);
  const char* names[] = {"y", "dx", "d fc.weight", "d fc.bias", "d proj.weight", "d proj.bias"};
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << names[i];
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << names[i];
    // Both sides round the (N, hidden) activations to 16 bits at different points (the epilogue
    // applies the GELU to the fp32 accumulator; LibTorch to the rounded GEMM output).
    EXPECT_LT(max_rel(got[i], want[i]), precision == Precision::kBf16 ? 3e-2 : 5e-3) << names[i];
  }
  const auto again = run(true);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(again[i].equal(got[i])) << "deterministic " << names[i];
}

TEST(FusedMlp, MatchesLinearGeluLinear) {
  for (auto p : {Precision::kBf16, Precision::kFp16}) {
    check_mlp({2, 64, 48}, 192, p);    // 3-d, GPT's 4x hidden
    check_mlp({1, 16}, 64, p);         // one row
    check_mlp({4096, 64}, 256, p);     // many rows
    check_mlp({3, 40, 768}, 3072, p);  // GPT-2's widths
  }
}

TEST(FusedMlp, RefusesWhatItDoesNotHandle) {
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const at::Tensor x = at::zeros({2, 16}, f32), fw = at::zeros({64, 16}, f32),
                   fb = at::zeros({64}, f32);
  const at::Tensor pw = at::zeros({16, 64}, f32), pb = at::zeros({16}, f32);
  EXPECT_FALSE(fused_mlp_applies(x, fw, fb, pw, pb)) << "fp32: no autocast";
  AutocastGuard autocast(kGpu, Precision::kBf16);
  EXPECT_TRUE(fused_mlp_applies(x, fw, fb, pw, pb));
  EXPECT_FALSE(fused_mlp_applies(x.cpu(), fw.cpu(), fb.cpu(), pw.cpu(), pb.cpu())) << "CPU";
  EXPECT_FALSE(fused_mlp_applies(at::zeros({2, 12}, f32), at::zeros({64, 12}, f32), fb,
                                 at::zeros({12, 64}, f32), at::zeros({12}, f32)))
      << "width not a multiple of 8";
  EXPECT_FALSE(fused_mlp_applies(x, fw, at::Tensor(), pw, pb)) << "no bias";
  EXPECT_FALSE(fused_mlp_applies(x, fw, fb, at::zeros({16, 32}, f32), pb)) << "shapes";
}

}  // namespace
}  // namespace dtrain::detail
