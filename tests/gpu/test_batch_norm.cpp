// The fused BatchNorm + shortcut + ReLU kernels (Note [fused BatchNorm]) against ATen's
// batch_norm, add and relu in double on the GPU: the output, the gradients of x, the shortcut,
// the weight and the bias, and the running statistics, in fp32, bf16 and fp16, channel counts and
// N·H·W that are multiples of no block size, in training and eval; deterministic; and the same
// forward and backward captured in a CUDA graph and replayed twice; a forked output's two uses.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/fused_batch_norm.h"
#include "cuda/graph.h"
#include "tensor_compare.h"

namespace dtrain::detail {
namespace {

using test::kGpu;
using test::max_rel;

// Fills free memory of the caching allocator's large and small pools with NaN, so that an output
// element the kernels do not write fails the comparison.
void poison_free_memory() {
  const auto f32 = at::TensorOptions().device(kGpu);
  std::vector<at::Tensor> held = {at::full({64 << 20}, std::nan(""), f32)};
  for (int i = 0; i < 64; ++i) held.push_back(at::full({64 << 10}, std::nan(""), f32));
}

struct Case {
  std::vector<int64_t> nchw;
  at::ScalarType dtype;
  bool residual, relu, training;
};

std::string name(const Case& k) {
  std::string s = "shape";
  for (int64_t d : k.nchw) s += " " + std::to_string(d);
  return s + " " + at::toString(k.dtype) + (k.residual ? " +residual" : "") +
         (k.relu ? " relu" : "") + (k.training ? " train" : " eval");
}

struct Result {
  at::Tensor y, dx, dres, dw, db, running_mean, running_var, batches;
};

struct Inputs {
  at::Tensor x, res, w, b, rm, rv, gy;
};

Inputs draw(const Case& k) {
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const int64_t c = k.nchw[1];
  Inputs in;
  // A mean far from zero against the spread: the variance must not cancel.
  const at::Tensor shift = at::randn({1, c, 1, 1}, f32).mul(4);
  in.x = (at::randn(k.nchw, f32).mul(1.5) + shift)
             .to(k.dtype)
             .contiguous(at::MemoryFormat::ChannelsLast);
  in.res = at::randn(k.nchw, f32).to(k.dtype).contiguous(at::MemoryFormat::ChannelsLast);
  in.w = at::randn({c}, f32).mul(0.5).add(1);
  in.b = at::randn({c}, f32).mul(0.2);
  in.rm = at::randn({c}, f32).mul(0.3);
  in.rv = at::rand({c}, f32).add(0.5);
  in.gy = at::randn(k.nchw, f32).to(k.dtype).contiguous(at::MemoryFormat::ChannelsLast);
  return in;
}

Result fused(const Case& k, const Inputs& in) {
  poison_free_memory();
  at::Tensor x = in.x.clone().requires_grad_(true);
  at::Tensor res = k.residual ? in.res.clone().requires_grad_(true) : at::Tensor();
  at::Tensor w = in.w.clone().requires_grad_(true), b = in.b.clone().requires_grad_(true);
  BatchNormState s{
      w,    b,   in.rm.clone(), in.rv.clone(), at::zeros({}, in.w.options().dtype(at::kLong)),
      1e-5, 0.1, k.training};
  EXPECT_TRUE(fused_batch_norm_applies(x, res, s));
  const at::Tensor y = fused_batch_norm(x, res, s, k.relu);
  EXPECT_EQ(y.scalar_type(), k.dtype);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  std::vector<at::Tensor> wrt = {x, w, b};
  if (k.residual) wrt.push_back(res);
  const auto g = torch::autograd::grad({y}, wrt, {in.gy});
  return {y.detach(),
          g[0],
          k.residual ? g[3] : at::Tensor(),
          g[1],
          g[2],
          s.running_mean,
          s.running_var,
          s.num_batches_tracked};
}

Result reference(const Case& k, const Inputs& in) {
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  at::Tensor x = d(in.x).requires_grad_(true);
  at::Tensor res = d(in.res).requires_grad_(true);
  at::Tensor w = d(in.w).requires_grad_(true), b = d(in.b).requires_grad_(true);
  at::Tensor rm = d(in.rm), rv = d(in.rv);
  at::Tensor y = at::batch_norm(x, w, b, rm, rv, k.training, 0.1, 1e-5, /*cudnn_enabled=*/false);
  if (k.residual) y = y + res;
  if (k.relu) y = at::relu(y);
  std::vector<at::Tensor> wrt = {x, w, b};
  if (k.residual) wrt.push_back(res);
  const auto g = torch::autograd::grad({y}, wrt, {d(in.gy)});
  return {y.detach(), g[0], k.residual ? g[3] : at::Tensor(), g[1], g[2], rm, rv, at::Tensor()};
}

void check_batch_norm(const Case& k) {
  SCOPED_TRACE(name(k));
  at::manual_seed(11);
  const Inputs in = draw(k);
  const Result got = fused(k, in), want = reference(k, in);
  // One rounding of each output to its dtype (2^-24, 2^-11, 2^-8 of the largest value).
  const double tol = k.dtype == at::kFloat ? 1e-5 : k.dtype == at::kHalf ? 2e-3 : 1e-2;
  EXPECT_LT(max_rel(got.y, want.y), tol) << "y";
  EXPECT_LT(max_rel(got.dx, want.dx), k.dtype == at::kFloat ? 1e-4 : tol) << "dx";
  if (k.residual) {
    EXPECT_LT(max_rel(got.dres, want.dres), tol) << "dresidual";
  }
  EXPECT_LT(max_rel(got.dw, want.dw), 1e-4) << "dweight";
  EXPECT_LT(max_rel(got.db, want.db), 1e-4) << "dbias";
  EXPECT_LT(max_rel(got.running_mean, want.running_mean), 1e-5) << "running_mean";
  EXPECT_LT(max_rel(got.running_var, want.running_var), 1e-5) << "running_var";
  EXPECT_EQ(got.batches.item<int64_t>(), k.training ? 1 : 0);
  // The same inputs give the same bits (fixed summation order, no atomics on values).
  const Result again = fused(k, in);
  EXPECT_TRUE(again.y.equal(got.y) && again.dx.equal(got.dx) && again.dw.equal(got.dw) &&
              again.db.equal(got.db) && again.running_var.equal(got.running_var));
}

// (N, C, H, W): C = 64 and 256 (16-byte vectors), 40 (vectors, a tile of 64 part-filled), 37 and 3
// (one channel a thread), 2048 (many tiles); N·H·W from 6 to 16,368 rows (one block to many).
const std::vector<std::vector<int64_t>> kShapes = {
    {4, 64, 7, 9},  {16, 40, 33, 31}, {16, 37, 33, 31}, {2, 3, 1, 3},
    {5, 256, 3, 3}, {2, 2048, 2, 3},  {8, 64, 45, 45}};

TEST(FusedBatchNorm, MatchesATenInDoubleWithAndWithoutShortcutAndRelu) {
  for (const auto& shape : kShapes)
    for (auto dtype : {at::kFloat, at::kBFloat16})
      for (bool residual : {false, true})
        for (bool relu : {false, true}) check_batch_norm({shape, dtype, residual, relu, true});
  check_batch_norm({{16, 40, 33, 31}, at::kHalf, true, true, true});
  check_batch_norm({{16, 37, 33, 31}, at::kHalf, false, true, true});
}

TEST(FusedBatchNorm, SumsOfGradientsThatNearlyCancelStayWithinRoundingOfTheirTerms) {
  // A BatchNorm's bias gradient in a network is a sum over the batch whose terms nearly cancel
  // (the next BatchNorm's dx sums to zero over the batch per channel, and a convolution at 1x1
  // passes that sum through): its error must be a rounding of the terms' size, not of the sum's.
  // ResNet's shapes at small images and batches (one block of rows to several); dy with zero mean
  // per channel. Measured on an H100: 8e-9 to 4.4e-8 of sum |dy|.
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {24, 64, 4, 4}, {12, 64, 4, 4}, {24, 64, 2, 2}, {96, 64, 4, 4}, {24, 512, 1, 1}})
    for (bool relu : {false, true})
      for (bool residual : {false, true}) {
        const Case k{shape, at::kFloat, residual, relu, true};
        SCOPED_TRACE(name(k));
        at::manual_seed(11);
        Inputs in = draw(k);
        in.gy = (in.gy - in.gy.mean({0, 2, 3}, true)).contiguous(at::MemoryFormat::ChannelsLast);
        const Result got = fused(k, in), want = reference(k, in);
        const double terms = in.gy.to(at::kDouble).abs().sum({0, 2, 3}).max().item<double>();
        auto error = [&](const at::Tensor& a, const at::Tensor& b) {
          return (a.to(at::kDouble) - b).abs().max().item<double>() / terms;
        };
        EXPECT_LT(error(got.db, want.db), 2e-7) << "dbias";
        EXPECT_LT(error(got.dw, want.dw), 2e-6) << "dweight";
        EXPECT_LT(max_rel(got.dx, want.dx), 1e-5) << "dx";
      }
}

TEST(FusedBatchNorm, EvalUsesTheRunningStatisticsAndLeavesThem) {
  for (const auto& shape : {kShapes[0], kShapes[2], kShapes[5]})
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      check_batch_norm({shape, dtype, true, true, false});
      check_batch_norm({shape, dtype, false, false, false});
    }
}

TEST(FusedBatchNorm, AppliesOnlyWhereItCan) {
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);
  const at::Tensor v = at::ones({8}, f32), batches = at::zeros({}, f32.dtype(at::kLong));
  const BatchNormState s{v, v, v.clone(), v.clone(), batches, 1e-5, 0.1, true};
  const at::Tensor cl = at::zeros({2, 8, 3, 3}, f32).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(fused_batch_norm_applies(cl, at::Tensor(), s));
  EXPECT_TRUE(fused_batch_norm_applies(cl, cl.clone(), s));
  EXPECT_FALSE(fused_batch_norm_applies(at::zeros({2, 8, 3, 3}, f32), at::Tensor(), s));  // NCHW
  EXPECT_FALSE(fused_batch_norm_applies(cl.cpu(), at::Tensor(), s));
  EXPECT_FALSE(fused_batch_norm_applies(cl.to(at::kDouble), at::Tensor(), s));
  EXPECT_FALSE(fused_batch_norm_applies(cl, cl.to(at::kBFloat16), s));  // shortcut's dtype
  EXPECT_FALSE(fused_batch_norm_applies(at::zeros({1, 8, 1, 1}, f32), at::Tensor(), s));  // 1 row
  BatchNormState no_stats = s;
  no_stats.running_mean = at::Tensor();
  EXPECT_FALSE(fused_batch_norm_applies(cl, at::Tensor(), no_stats));
}

// A forked output (fused_batch_norm_forked): the backward takes each use's gradient apart and adds
// them as it reads; the result is ATen's for the summed gradient, with either use alone too.
TEST(FusedBatchNorm, ForkedOutputTakesBothUsesGradients) {
  for (const auto& shape : {kShapes[0], kShapes[2], kShapes[6]})
    for (auto dtype : {at::kFloat, at::kBFloat16})
      for (bool residual : {false, true})
        for (int uses : {3, 1, 2}) {  // bit 0: the first output's gradient, bit 1: the second's
          const Case k{shape, dtype, residual, true, true};
          SCOPED_TRACE(name(k) + " uses " + std::to_string(uses));
          at::manual_seed(5);
          Inputs in = draw(k);
          const at::Tensor gy1 = in.gy,
                           gy2 = at::randn_like(in.gy, in.gy.options().dtype(at::kFloat))
                                     .to(dtype)
                                     .contiguous(at::MemoryFormat::ChannelsLast);
          poison_free_memory();
          at::Tensor x = in.x.clone().requires_grad_(true);
          at::Tensor res = residual ? in.res.clone().requires_grad_(true) : at::Tensor();
          at::Tensor w = in.w.clone().requires_grad_(true), b = in.b.clone().requires_grad_(true);
          BatchNormState s{w,
                           b,
                           in.rm.clone(),
                           in.rv.clone(),
                           at::zeros({}, in.w.options().dtype(at::kLong)),
                           1e-5,
                           0.1,
                           true};
          const auto y = fused_batch_norm_forked(x, res, s, true);
          EXPECT_EQ(y[0].data_ptr(), y[1].data_ptr());
          std::vector<at::Tensor> outs, grads;
          if (uses & 1) outs.push_back(y[0]), grads.push_back(gy1);
          if (uses & 2) outs.push_back(y[1]), grads.push_back(gy2);
          std::vector<at::Tensor> wrt = {x, w, b};
          if (residual) wrt.push_back(res);
          const auto got = torch::autograd::grad(outs, wrt, grads);
          // ATen in double with the uses' gradients summed.
          in.gy = at::zeros_like(gy1, gy1.options().dtype(at::kFloat));
          if (uses & 1) in.gy = in.gy + gy1.to(at::kFloat);
          if (uses & 2) in.gy = in.gy + gy2.to(at::kFloat);
          const Result want = reference(k, in);
          const double tol = dtype == at::kFloat ? 1e-4 : 1e-2;
          EXPECT_LT(max_rel(y[0].detach(), want.y), tol) << "y";
          EXPECT_LT(max_rel(got[0], want.dx), tol) << "dx";
          EXPECT_LT(max_rel(got[1], want.dw), 1e-4) << "dweight";
          EXPECT_LT(max_rel(got[2], want.db), 1e-4) << "dbias";
          if (residual) {
            EXPECT_LT(max_rel(got[3], want.dres), tol) << "dresidual";
          }
        }
}

// Forward and backward captured once and replayed twice give the eager calls' outputs and
// running statistics bit for bit: the ticket counters are left ready for the next replay.
TEST(FusedBatchNorm, CapturedInACudaGraphReplaysLikeEagerCalls) {
  at::manual_seed(3);
  const Case k{{8, 64, 20, 20}, at::kBFloat16, true, true, true};
  const Inputs in = draw(k);
  SideStreamGuard side(kGpu);
  at::Tensor x = in.x.clone().requires_grad_(true), res = in.res.clone().requires_grad_(true);
  at::Tensor w = in.w.clone().requires_grad_(true), b = in.b.clone().requires_grad_(true);
  BatchNormState s{
      w,    b,   in.rm.clone(), in.rv.clone(), at::zeros({}, in.w.options().dtype(at::kLong)),
      1e-5, 0.1, true};
  at::Tensor y_out = at::empty_like(in.x), dx_out = at::empty_like(in.x),
             dw_out = at::empty_like(in.w);
  auto body = [&] {
    const at::Tensor y = fused_batch_norm(x, res, s, true);
    const auto g = torch::autograd::grad({y}, {x, w, b, res}, {in.gy});
    y_out.copy_(y);
    dx_out.copy_(g[0]);
    dw_out.copy_(g[1]);
  };
  const at::Tensor rm0 = s.running_mean.clone(), rv0 = s.running_var.clone();
  std::vector<std::vector<at::Tensor>> eager;
  for (int i = 0; i < 2; ++i) {
    body();
    eager.push_back({y_out.clone(), dx_out.clone(), dw_out.clone(), s.running_mean.clone(),
                     s.running_var.clone()});
  }
  s.running_mean.copy_(rm0);
  s.running_var.copy_(rv0);
  s.num_batches_tracked.zero_();
  StepGraph graph(kGpu);
  graph.capture(body);
  for (int i = 0; i < 2; ++i) {
    graph.replay();
    synchronize(kGpu);
    SCOPED_TRACE("replay " + std::to_string(i));
    EXPECT_TRUE(y_out.equal(eager[i][0]));
    EXPECT_TRUE(dx_out.equal(eager[i][1]));
    EXPECT_TRUE(dw_out.equal(eager[i][2]));
    EXPECT_TRUE(s.running_mean.equal(eager[i][3]));
    EXPECT_TRUE(s.running_var.equal(eager[i][4]));
  }
  EXPECT_EQ(s.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_FALSE(eager[0][3].equal(eager[1][3]));  // the second call moved the running mean
}

}  // namespace
}  // namespace dtrain::detail
