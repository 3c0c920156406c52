// WeightCasts (Note [weight casts]): under autocast, the weights cast in one multi-tensor copy are
// autocast's own casts bit for bit, and their gradients reach the weights as autocast's do; with
// autocast off nothing is cast. A ResNet under bf16 autocast (CPU) computes the same loss and the
// same gradients with the casts (model.fused_kernels) as without.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "dtrain/amp.h"
#include "dtrain/config.h"
#include "dtrain/models.h"
#include "model_support.h"
#include "models/weight_casts.h"

namespace dtrain::test {
namespace {

TEST(WeightCasts, AreAutocastsCastsAndTheirGradientsReachTheWeights) {
  at::manual_seed(5);
  const at::Device cpu(at::kCPU);
  at::Tensor w =
      at::randn({4, 3, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_();
  at::Tensor v = at::randn({7}).requires_grad_();
  const at::Tensor frozen = at::randn({5});             // no gradient wanted
  const at::Tensor wide = at::randn({3}, at::kDouble);  // another dtype: left to autocast
  const at::Tensor gw = at::randn({4, 3, 3, 3}), gv = at::randn({7});

  AutocastGuard autocast(cpu, Precision::kBf16);
  ASSERT_TRUE(autocast.active()) << "this LibTorch has no bf16 autocast on the CPU";
  const detail::WeightCasts casts({w, v, frozen, wide}, cpu);
  EXPECT_EQ(casts.size(), 3u);
  EXPECT_TRUE(casts(wide).is_same(wide));
  const at::Tensor cw = casts(w), cv = casts(v);
  EXPECT_EQ(cw.scalar_type(), at::kBFloat16);
  EXPECT_EQ(cw.strides(), w.strides());  // the weight's layout (channels-last here)
  EXPECT_TRUE(cw.equal(w.detach().to(at::kBFloat16)));
  EXPECT_TRUE(cv.equal(v.detach().to(at::kBFloat16)));
  EXPECT_TRUE(cw.requires_grad());
  EXPECT_FALSE(casts(frozen).requires_grad());
  EXPECT_TRUE(casts(frozen).equal(frozen.to(at::kBFloat16)));

  // The gradients, against autocast's own cast (its ToCopyBackward).
  (cw.to(at::kFloat) * gw).sum().backward();
  (cv.to(at::kFloat) * gv).sum().backward();
  const at::Tensor ours_w = w.grad().clone(), ours_v = v.grad().clone();
  w.mutable_grad().reset();
  v.mutable_grad().reset();
  (w.to(at::kBFloat16).to(at::kFloat) * gw).sum().backward();
  (v.to(at::kBFloat16).to(at::kFloat) * gv).sum().backward();
  EXPECT_EQ(ours_w.scalar_type(), at::kFloat);
  EXPECT_TRUE(ours_w.equal(w.grad()));
  EXPECT_TRUE(ours_v.equal(v.grad()));

  // No gradient recorded under no_grad.
  at::NoGradGuard no_grad;
  EXPECT_FALSE(detail::WeightCasts({w}, cpu)(w).requires_grad());
}

TEST(WeightCasts, NothingWithoutAutocast) {
  const at::Tensor w = at::randn({3}).requires_grad_();
  const detail::WeightCasts casts({w}, at::Device(at::kCPU));
  EXPECT_EQ(casts.size(), 0u);
  EXPECT_TRUE(casts(w).is_same(w));
}

// Every parameter's gradient after one bf16 forward and backward.
std::vector<at::Tensor> bf16_gradients(bool fused, at::Tensor& loss) {
  dtrain::ModelConfig c;
  c.channels_last = true;
  c.fused_kernels = fused;
  at::manual_seed(11);
  auto m = build("resnet18", c, image_spec({3, 32, 32}, 10));
  at::manual_seed(12);
  const at::Tensor x = at::randn({4, 3, 32, 32});
  {
    AutocastGuard autocast(at::Device(at::kCPU), Precision::kBf16);
    EXPECT_TRUE(autocast.active());
    loss = m->forward(x).to(at::kFloat).logsumexp(1).mean();
  }
  loss.backward();
  std::vector<at::Tensor> g;
  for (const auto& p : m->parameters()) g.push_back(p.grad());
  return g;
}

TEST(WeightCasts, ResNetUnderAutocastSameLossAndGradients) {
  at::Tensor with, without;
  const auto a = bf16_gradients(true, with), b = bf16_gradients(false, without);
  EXPECT_TRUE(with.equal(without)) << with.item<float>() << " " << without.item<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined()) << "parameter " << i << " got no gradient";
    EXPECT_EQ(a[i].scalar_type(), at::kFloat) << i;
    EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i << ": "
                                  << (a[i] - b[i]).abs().max().item<float>();
  }
}

}  // namespace
}  // namespace dtrain::test
