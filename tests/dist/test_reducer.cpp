// Reducer under mpirun: averages by formula, bucket timeline, unused parameters, re-planning.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/nn/modules/linear.h>

#include "dist/reducer.h"
#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"

namespace dtrain {
namespace {

using test::World;

std::vector<at::Tensor> make_params(int n, int64_t width) {
  std::vector<at::Tensor> ps;
  for (int i = 0; i < n; ++i) ps.push_back(at::randn({width, width}).requires_grad_(true));
  return ps;
}
std::vector<std::string> names_for(size_t n) {
  std::vector<std::string> v;
  for (size_t i = 0; i < n; ++i) v.push_back("p" + std::to_string(i));
  return v;
}

// Rank r's loss is (r + 1) * sum(p * c_i): gradient (r + 1) * c_i, average (world + 1) / 2 * c_i.
void check_average(detail::ReducerOptions opt, double tol) {
  World w;
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  auto params = make_params(6, 8);
  detail::Reducer reducer(params, names_for(params.size()), *comm, *comm, opt);
  for (int step = 0; step < 3; ++step) {  // step 1 on runs after the re-plan
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    reducer.prepare(true);
    at::Tensor loss = at::zeros({});
    for (size_t i = 0; i < params.size(); ++i)
      loss = loss + (params[i] * static_cast<double>(i + 1)).sum();
    (loss * static_cast<double>(w.rank + 1)).backward();
    reducer.finish();
    for (size_t i = 0; i < params.size(); ++i) {
      const double expect = (w.size + 1) / 2.0 * static_cast<double>(i + 1);
      EXPECT_NEAR(params[i].grad().min().item<double>(), expect, tol * expect);
      EXPECT_NEAR(params[i].grad().max().item<double>(), expect, tol * expect);
    }
  }
  EXPECT_EQ(reducer.rebuilds(), 1);
}

TEST(Reducer, AveragesByFormulaManyBuckets) {
  detail::ReducerOptions o;
  o.first_bucket_cap_bytes = 1;  // every parameter in its own bucket
  o.bucket_cap_bytes = 1;
  check_average(o, 1e-12);
}

TEST(Reducer, AveragesByFormulaOneBucketNoOverlap) {
  detail::ReducerOptions o;
  o.overlap = false;
  check_average(o, 1e-12);
}

TEST(Reducer, AveragesInBf16OnTheWire) {
  detail::ReducerOptions o;
  o.comm_dtype = at::kBFloat16;
  o.bucket_cap_bytes = 300;
  check_average(o, 1e-2);  // bf16 keeps 8 bits of mantissa
}

TEST(Reducer, AccumulationCommunicatesOnlyOnTheLastMicroBatch) {
  World w;
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  auto params = make_params(3, 4);
  detail::Reducer reducer(params, names_for(3), *comm, *comm, detail::ReducerOptions{});
  for (auto& p : params) p.mutable_grad() = at::Tensor();
  for (int m = 0; m < 3; ++m) {
    reducer.prepare(m == 2);
    at::Tensor loss = at::zeros({});
    for (auto& p : params) loss = loss + p.sum();
    (loss * static_cast<double>(w.rank + 1)).backward();
    if (m < 2) {  // local accumulation only: this rank's own gradient so far
      EXPECT_DOUBLE_EQ(params[0].grad()[0][0].item<double>(), (m + 1.0) * (w.rank + 1));
    }
  }
  reducer.finish();
  EXPECT_DOUBLE_EQ(params[0].grad()[0][0].item<double>(), 3.0 * (w.size + 1) / 2.0);
}

TEST(Reducer, OverlapLaunchesBucketsBeforeBackwardEnds) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  // A deep chain: the last layers' gradients are ready long before the first layers'.
  std::vector<at::Tensor> params = make_params(12, 64);
  detail::ReducerOptions o;
  o.first_bucket_cap_bytes = 64 * 64 * 4;
  o.bucket_cap_bytes = 64 * 64 * 4;
  detail::Reducer reducer(params, names_for(params.size()), *comm, *comm, o);
  for (int step = 0; step < 2; ++step) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    reducer.prepare(true);
    at::Tensor x = at::randn({256, 64});
    for (auto& p : params) x = at::tanh(at::mm(x, p));
    x.sum().backward();
    reducer.finish();
    const auto& tl = reducer.last_timeline();
    ASSERT_EQ(tl.size(), params.size());
    // The first bucket (last layer) went out while backward was still running.
    EXPECT_LT(tl.front().launched, reducer.last_backward_end());
    for (size_t b = 1; b < tl.size(); ++b) EXPECT_GE(tl[b].launched, tl[b - 1].launched);
    // Each wait returns after its launch and after backward (the waits run once it has ended),
    // in plan order.
    for (size_t b = 0; b < tl.size(); ++b) {
      EXPECT_GE(tl[b].done, tl[b].launched);
      EXPECT_GE(tl[b].done, reducer.last_backward_end());
      if (b > 0) {
        EXPECT_GE(tl[b].done, tl[b - 1].done);
      }
    }
    // The origin is when prepare() ran: before now, after the step began.
    EXPECT_LE(reducer.last_start(), std::chrono::steady_clock::now());
  }
}

TEST(Reducer, UnusedParameterIsNamedNotAHang) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  auto params = make_params(3, 4);
  detail::Reducer reducer(params, {"fc.weight", "unused.weight", "head.weight"}, *comm, *comm,
                          detail::ReducerOptions{});
  reducer.prepare(true);
  (params[0].sum() + params[2].sum()).backward();
  try {
    reducer.finish();
    FAIL() << "no error for a parameter without gradient";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unused.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dist.find_unused_parameters"), std::string::npos);
  }
}

TEST(Reducer, UnusedParametersAllowedContributeZero) {
  World w;
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  auto params = make_params(3, 4);
  detail::ReducerOptions o;
  o.find_unused_parameters = true;
  detail::Reducer reducer(params, names_for(3), *comm, *comm, o);
  for (int step = 0; step < 2; ++step) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    reducer.prepare(true);
    // Rank 0 leaves parameter 1 unused; the others use it with gradient 1.
    at::Tensor loss = params[0].sum() + params[2].sum();
    if (w.rank != 0) loss = loss + params[1].sum();
    loss.backward();
    reducer.finish();
    EXPECT_DOUBLE_EQ(params[0].grad()[0][0].item<double>(), 1.0);
    EXPECT_NEAR(params[1].grad()[0][0].item<double>(), (w.size - 1.0) / w.size, 1e-7);  // fp32
  }
}

// The averaged gradients stay in the bucket buffers (Note [bucket views]). Each grad() is a view of
// its bucket laid out like its parameter (a channels-last weight keeps its strides, as the fused
// optimizers need), and a step that does not clear the gradients accumulates into those views.
TEST(Reducer, GradientsStayInTheBucketsInTheParametersLayout) {
  World w;
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  at::manual_seed(7);  // the same parameters and coefficients on every rank
  std::vector<at::Tensor> params = {
      at::randn({4, 3, 2, 5}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true),
      at::randn({6}).requires_grad_(true), at::randn({5, 7}).requires_grad_(true)};
  std::vector<at::Tensor> coef;
  for (const auto& p : params) coef.push_back(at::randn(p.sizes(), p.options()));
  detail::Reducer reducer(params, names_for(params.size()), *comm, *comm, detail::ReducerOptions{});
  auto backward = [&] {
    at::Tensor loss = at::zeros({});
    for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * coef[i]).sum();
    (loss * static_cast<double>(w.rank + 1)).backward();
  };
  const double mean = (w.size + 1) / 2.0;  // of (rank + 1) over the ranks
  for (int step = 0; step < 2; ++step) {   // step 1 runs after the re-plan
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    reducer.prepare(true);
    backward();
    reducer.finish();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& g = params[i].grad();
      EXPECT_EQ(g.strides(), params[i].strides()) << "parameter " << i;
      EXPECT_TRUE(at::allclose(g, coef[i] * mean, 1e-6, 1e-6)) << "parameter " << i;
    }
    // One bucket (the default cap): every gradient lives in the same buffer.
    ASSERT_EQ(reducer.buckets().size(), 1u);
    EXPECT_TRUE(params[0].grad().is_alias_of(params[2].grad()));
    EXPECT_TRUE(params[1].grad().is_alias_of(params[2].grad()));
  }
  // No clearing: autograd adds into the views, and the average is of the sums.
  reducer.prepare(true);
  backward();
  reducer.finish();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(at::allclose(params[i].grad(), coef[i] * (2 * mean), 1e-6, 1e-6)) << i;
}

}  // namespace
}  // namespace dtrain
