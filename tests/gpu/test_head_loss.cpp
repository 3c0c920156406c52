// The fused head and loss (Note [fused head and loss]) against at::linear and cross_entropy on
// fp32 logits: the loss, and the gradients of the activations and the head's weight after a
// scaled backward, for fp32 and bf16/fp16 autocast, one chunk and several (the last shorter),
// 16-byte rows and odd vocabularies.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "cuda/fused_head.h"
#include "dtrain/amp.h"
#include "dtrain/config.h"
#include "tensor_compare.h"

namespace dtrain::detail {
namespace {

using test::kGpu;
using test::max_rel;

void check_head_loss(int64_t batch, int64_t seq, int64_t c, int64_t v, int64_t chunk,
                     Precision precision, double eps = 0.0) {
  SCOPED_TRACE(std::to_string(batch) + "x" + std::to_string(seq) + " rows, C " + std::to_string(c) +
               ", V " + std::to_string(v) + ", chunks of " + std::to_string(chunk) + ", " +
               to_string(precision) + ", label smoothing " + std::to_string(eps));
  at::manual_seed(5);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const at::Tensor y0 = at::randn({batch, seq, c}, f32), w0 = at::randn({v, c}, f32).mul(0.3);
  const at::Tensor t = at::randint(0, v, {batch, seq}, f32.dtype(at::kLong));
  auto run = [&](bool fused) {
    at::Tensor y = y0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::Tensor loss;
    {
      AutocastGuard autocast(kGpu, precision);
      if (fused) {
        EXPECT_TRUE(fused_head_loss_applies(w, t));
        loss = fused_head_loss(y, w, t, chunk, eps);
      } else {
        loss = at::cross_entropy_loss(at::linear(y, w).to(at::kFloat).reshape({-1, v}),
                                      t.reshape({-1}), {}, at::Reduction::Mean, -100, eps);
      }
    }
    const auto g = torch::autograd::grad({loss * 0.37}, {y, w});
    return std::vector<at::Tensor>{loss.detach(), g[0], g[1]};
  };
  const auto got = run(true), want = run(false);
  EXPECT_EQ(got[0].scalar_type(), at::kFloat);
  EXPECT_NEAR(got[0].item<double>(), want[0].item<double>(), 1e-5 * want[0].item<double>())
      << "loss";
  const double tol = precision == Precision::kFp32 ? 1e-5 : 1e-2;
  EXPECT_LT(max_rel(got[1], want[1]), tol) << "dy";
  EXPECT_LT(max_rel(got[2], want[2]), tol) << "dw";
  EXPECT_EQ(got[1].scalar_type(), at::kFloat) << "dy in y's dtype";
  EXPECT_EQ(got[2].scalar_type(), at::kFloat) << "dw in w's dtype";
}

TEST(FusedHeadLoss, MatchesLinearAndCrossEntropy) {
  at::globalContext().setAllowTF32CuBLAS(false);
  for (auto p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    check_head_loss(2, 50, 64, 4096, 0, p);        // one chunk
    check_head_loss(2, 50, 64, 4096, 40, p);       // chunks of 40, 40 and 20 rows
    check_head_loss(3, 7, 32, 5003, 8, p);         // an odd vocabulary: element by element
    check_head_loss(2, 50, 64, 4096, 40, p, 0.1);  // label smoothing (train.label_smoothing)
    check_head_loss(3, 7, 32, 5003, 8, p, 0.2);
  }
}

TEST(FusedHeadLoss, GradientOfOneInputOnly) {
  // The activations' gradient alone (a frozen head), then the head's alone.
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  at::manual_seed(9);
  const at::Tensor y0 = at::randn({4, 16, 32}, f32), w0 = at::randn({2048, 32}, f32).mul(0.2);
  const at::Tensor t = at::randint(0, 2048, {4, 16}, f32.dtype(at::kLong));
  for (int which : {0, 1}) {
    at::Tensor y = y0.clone().requires_grad_(which == 0), w = w0.clone().requires_grad_(which == 1);
    const at::Tensor& x = which == 0 ? y : w;
    const at::Tensor got = torch::autograd::grad({fused_head_loss(y, w, t, 24)}, {x})[0];
    at::Tensor y2 = y0.clone().requires_grad_(which == 0),
               w2 = w0.clone().requires_grad_(which == 1);
    const at::Tensor& x2 = which == 0 ? y2 : w2;
    const at::Tensor want = torch::autograd::grad(
        {at::cross_entropy_loss(at::linear(y2, w2).reshape({-1, 2048}), t.reshape({-1}))}, {x2})[0];
    EXPECT_LT(max_rel(got, want), 1e-5) << (which == 0 ? "dy" : "dw");
  }
}

TEST(FusedHeadLoss, RefusesWhatItDoesNotHandle) {
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const at::Tensor t = at::zeros({4}, f32.dtype(at::kLong));
  EXPECT_TRUE(fused_head_loss_applies(at::zeros({1024, 16}, f32), t));
  EXPECT_FALSE(fused_head_loss_applies(at::zeros({512, 16}, f32), t));    // small vocabulary
  EXPECT_FALSE(fused_head_loss_applies(at::zeros({1024, 12}, f32), t));   // width
  EXPECT_FALSE(fused_head_loss_applies(at::zeros({1024, 16}), t.cpu()));  // CPU
  EXPECT_FALSE(fused_head_loss_applies(at::zeros({1024, 16}, f32), t.to(at::kInt)));  // not int64
}

}  // namespace
}  // namespace dtrain::detail
