// The max-pool kernels (Note [max-pool kernels]) against ATen's max_pool2d on the GPU: output and
// input gradient, fp32 and bf16, 16-byte vectors and one channel a thread, ResNet's 3x3/2 window
// and others, sizes the stride does not divide; ties and NaN send the gradient to ATen's element.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/max_pool.h"
#include "tensor_compare.h"

namespace dtrain::detail {
namespace {

using test::kGpu;

struct Pool {
  int kernel, stride, padding;
};

// Ours and ATen's output and input gradient for the same x and output gradient.
void compare(const at::Tensor& x0, const Pool& p, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(max_pool_applies(x0, p.kernel, p.stride, p.padding));
  at::Tensor x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
  // Unwritten gradient elements would keep this NaN: every one must be written.
  const at::Tensor y = max_pool(x, p.kernel, p.stride, p.padding);
  const at::Tensor yr =
      at::max_pool2d(xr, {p.kernel, p.kernel}, {p.stride, p.stride}, {p.padding, p.padding});
  ASSERT_EQ(y.sizes(), yr.sizes());
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(y.scalar_type(), x0.scalar_type());
  const at::Tensor gy = at::randn(y.sizes(), y.options().dtype(at::kFloat))
                            .to(y.scalar_type())
                            .contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor gx = torch::autograd::grad({y}, {x}, {gy})[0];
  const at::Tensor gxr = torch::autograd::grad({yr}, {xr}, {gy})[0];
  EXPECT_TRUE(y.equal(yr) ||
              (y.isnan().equal(yr.isnan()) && y.nan_to_num(0).equal(yr.nan_to_num(0))))
      << "output";
  // Each input element's gradient is a sum of at most four output gradients, in fp32 on both
  // sides: equal but for the order of the sum.
  const double tol = x0.scalar_type() == at::kFloat ? 1e-6 : 1e-2;
  EXPECT_LT(test::max_rel(gx, gxr), tol) << "input gradient";
  EXPECT_TRUE(gx.ne(0).equal(gxr.ne(0))) << "the gradient goes to other elements than ATen's";
}

at::Tensor channels_last(const at::Tensor& t) {
  return t.contiguous(at::MemoryFormat::ChannelsLast);
}

TEST(MaxPool, MatchesATenOnResnetsWindowAndOthers) {
  at::manual_seed(7);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const std::vector<std::vector<int64_t>> shapes = {
      {4, 64, 56, 56}, {3, 64, 57, 55}, {2, 3, 11, 13}, {2, 37, 9, 8}, {1, 8, 1, 1}, {2, 16, 2, 3}};
  for (const auto& shape : shapes)
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
      for (const Pool& p : {Pool{3, 2, 1}, Pool{2, 2, 0}, Pool{3, 1, 1}, Pool{5, 3, 2}}) {
        if (shape[2] + 2 * p.padding < p.kernel || shape[3] + 2 * p.padding < p.kernel) continue;
        std::string what = "shape";
        for (int64_t d : shape) what += " " + std::to_string(d);
        what += " " + std::string(at::toString(dtype)) + " kernel " + std::to_string(p.kernel) +
                " stride " + std::to_string(p.stride) + " padding " + std::to_string(p.padding);
        compare(channels_last(at::randn(shape, f32).to(dtype)), p, what);
      }
}

// Few distinct values: most windows hold equal maxima, and the first in row order takes the
// gradient as in ATen's kernel. NaN wins its windows.
TEST(MaxPool, TiesAndNanGoWhereATensGo) {
  at::manual_seed(8);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor ties = at::randint(0, 3, {2, 64, 17, 19}, f32).to(dtype);
    compare(channels_last(ties), {3, 2, 1}, std::string("ties ") + at::toString(dtype));
    at::Tensor nan = at::randn({2, 16, 9, 9}, f32);
    nan.index_put_({0, 3, 4, 4}, std::nan(""));
    compare(channels_last(nan.to(dtype)), {3, 2, 1}, std::string("NaN ") + at::toString(dtype));
  }
}

TEST(MaxPool, AppliesOnlyWhereItCan) {
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const at::Tensor cl = channels_last(at::zeros({2, 8, 9, 9}, f32));
  EXPECT_TRUE(max_pool_applies(cl, 3, 2, 1));
  EXPECT_FALSE(max_pool_applies(at::zeros({2, 8, 9, 9}, f32), 3, 2, 1));  // NCHW
  EXPECT_FALSE(max_pool_applies(cl.cpu(), 3, 2, 1));
  EXPECT_FALSE(max_pool_applies(cl.to(at::kDouble), 3, 2, 1));
  EXPECT_FALSE(max_pool_applies(cl, 3, 2, 2));   // padding over kernel / 2
  EXPECT_FALSE(max_pool_applies(cl, 16, 1, 0));  // a window position over a byte's range
  EXPECT_FALSE(max_pool_applies(cl, 11, 1, 0));  // no output
}

}  // namespace
}  // namespace dtrain::detail
