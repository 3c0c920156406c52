// The gpu tier: the fused cross-entropy (cuda/fused_loss.h) gives the loss and gradient of
// cross_entropy on fp32 logits, with label smoothing too, also when it writes the gradient over
// the logits.
#include "gpu_support.h"

namespace dtrain::test {
namespace {

// ---- fused cross-entropy: the same loss and gradient as cross_entropy on fp32 logits -----------
TEST(Gpu, FusedCrossEntropyMatchesCrossEntropyOnFp32Logits) {
  at::manual_seed(7);
  const int64_t n = 96;
  // 5003: odd rows, element by element; 4096: rows of whole 16-byte vectors.
  for (int64_t v : {5003, 4096}) {
    for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      for (bool mean : {true, false}) {
        for (double eps : {0.0, 0.1}) {
          const at::Tensor base =
              (at::randn({n, v}, at::TensorOptions().device(kGpu)) * 3).to(dtype);
          const at::Tensor targets =
              at::randint(0, v, {n}, at::TensorOptions().device(kGpu).dtype(at::kLong));
          ASSERT_TRUE(detail::fused_cross_entropy_applies(base, targets));
          // Reference: PyTorch's cross_entropy on an fp32 copy, gradient cast back to `dtype`.
          at::Tensor a = base.detach().clone().requires_grad_(true);
          at::Tensor ref =
              at::cross_entropy_loss(a.to(at::kFloat), targets, {},
                                     mean ? at::Reduction::Mean : at::Reduction::Sum, -100, eps);
          (ref * 0.37).backward();
          at::Tensor b = base.detach().clone().requires_grad_(true);
          at::Tensor got = detail::fused_cross_entropy(b, targets, mean, false, eps);
          (got * 0.37).backward();
          EXPECT_EQ(got.scalar_type(), at::kFloat);
          EXPECT_NEAR(got.item<double>(), ref.item<double>(), 1e-5 * std::fabs(ref.item<double>()))
              << at::toString(dtype) << " mean " << mean << " vocabulary " << v << " smoothing "
              << eps;
          const double tol = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 2e-3 : 1e-2;
          const double err =
              (a.grad().to(at::kFloat) - b.grad().to(at::kFloat)).abs().max().item<double>();
          const double scale = a.grad().to(at::kFloat).abs().max().item<double>();
          EXPECT_LT(err, tol * scale) << at::toString(dtype) << " mean " << mean << " vocabulary "
                                      << v << " smoothing " << eps;
          EXPECT_EQ(b.grad().scalar_type(), dtype);
        }
      }
    }
  }
  // Small vocabularies and CPU tensors take the ordinary path.
  EXPECT_FALSE(detail::fused_cross_entropy_applies(
      at::zeros({4, 10}, at::TensorOptions().device(kGpu)),
      at::zeros({4}, at::TensorOptions().device(kGpu).dtype(at::kLong))));
  EXPECT_FALSE(
      detail::fused_cross_entropy_applies(at::zeros({4, 4096}), at::zeros({4}, at::kLong)));
}

// With grad_in_logits the gradient lands in the logits' own memory, and the same values as
// into a new buffer (Model::loss_can_reuse_outputs).
TEST(Gpu, FusedCrossEntropyWritesTheGradientOverTheLogits) {
  at::manual_seed(11);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor base = at::randn({64, 4096}, at::TensorOptions().device(kGpu)).to(dtype);
    const at::Tensor targets =
        at::randint(0, 4096, {64}, at::TensorOptions().device(kGpu).dtype(at::kLong));
    at::Tensor a = base.clone().requires_grad_(true), b = base.clone().requires_grad_(true);
    at::Tensor la = a * 1.5, lb = b * 1.5;  // logits: outputs of an op, as a model's are
    la.retain_grad();
    detail::fused_cross_entropy(la, targets, /*mean=*/true, /*grad_in_logits=*/false).backward();
    const at::Tensor held = lb;  // the logits' memory, still referenced
    const void* memory = lb.data_ptr();
    detail::fused_cross_entropy(lb, targets, /*mean=*/true, /*grad_in_logits=*/true).backward();
    EXPECT_TRUE(at::equal(a.grad(), b.grad())) << at::toString(dtype);
    EXPECT_EQ(held.data_ptr(), memory);
    EXPECT_TRUE(at::equal(held, la.grad()))
        << "the logits now hold their gradient, " << at::toString(dtype);
    EXPECT_FALSE(at::equal(held, base * 1.5));
  }
}

}  // namespace
}  // namespace dtrain::test
