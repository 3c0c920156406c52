// The MPI Communicator against what include/dtrain/comm.h promises: results by formula for each
// collective (reduce-scatter with unequal and empty segments too) and dtype, rank order, a failed
// collective as a dtrain::Error on every rank (so the caller can end the job), and a duplicated
// communicator (the caller may free its own handle).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"

namespace {

using dtrain::test::World;

// Rank r holds (r + 1) * [0, 1, ..., 6]: sum over ranks = w(w+1)/2 * i, max = w * i, min = i.
at::Tensor ramp(int rank, at::ScalarType dtype) {
  return (at::arange(7, at::kDouble) * (rank + 1)).to(dtype);
}

TEST(Communicator, AllReduceMatchesTheFormulaForEachOpAndDtype) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  ASSERT_EQ(comm->world(), w.size);
  ASSERT_EQ(comm->rank(), w.rank);
  const at::Tensor i = at::arange(7, at::kDouble);
  const double tri = w.size * (w.size + 1) / 2.0;
  for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(at::toString(dtype));
    at::Tensor sum = ramp(w.rank, dtype), mx = ramp(w.rank, dtype), mn = ramp(w.rank, dtype);
    comm->all_reduce(sum, dtrain::ReduceOp::kSum);
    comm->all_reduce(mx, dtrain::ReduceOp::kMax);
    comm->all_reduce(mn, dtrain::ReduceOp::kMin);
    EXPECT_TRUE(at::equal(sum.to(at::kDouble), i * tri)) << sum;
    EXPECT_TRUE(at::equal(mx.to(at::kDouble), i * w.size)) << mx;
    EXPECT_TRUE(at::equal(mn.to(at::kDouble), i)) << mn;
    EXPECT_EQ(sum.scalar_type(), dtype);
    if (at::isFloatingType(dtype)) {
      at::Tensor avg = ramp(w.rank, dtype);
      comm->all_reduce(avg, dtrain::ReduceOp::kAvg);
      EXPECT_TRUE(at::allclose(avg.to(at::kDouble), i * tri / w.size, 1e-2, 0)) << avg;
    }
  }
}

TEST(Communicator, AsyncAllReducesFinishInAnyWaitOrder) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  at::Tensor a = at::full({1000}, w.rank + 1.0, at::kFloat);
  at::Tensor b = at::full({3}, static_cast<int64_t>(w.rank), at::kLong);
  auto wa = comm->all_reduce_async(a, dtrain::ReduceOp::kSum);
  auto wb = comm->all_reduce_async(b, dtrain::ReduceOp::kMax);
  wb->wait();
  wa->wait();
  wa->wait();  // a second wait is harmless
  EXPECT_TRUE(at::equal(a, at::full({1000}, w.size * (w.size + 1) / 2.0, at::kFloat)));
  EXPECT_TRUE(at::equal(b, at::full({3}, static_cast<int64_t>(w.size - 1), at::kLong)));
}

// Counts per rank as a sharded bucket has them (empty segments included): rank r receives the
// reduction of segment r, by formula, for each op and dtype, synchronously or waited later; the
// input is left as it was.
TEST(Communicator, ReduceScatterGivesEachRankItsSegmentOfTheReduction) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  std::vector<int64_t> counts;
  for (int r = 0; r < w.size; ++r) counts.push_back(r == 1 ? 0 : 3 + r);
  int64_t total = 0, offset = 0;
  for (int r = 0; r < w.size; ++r) (r < w.rank ? offset : total) += counts[static_cast<size_t>(r)];
  total += offset;
  const int64_t mine = counts[static_cast<size_t>(w.rank)];
  const at::Tensor i = at::arange(total, at::kDouble);
  const double tri = w.size * (w.size + 1) / 2.0;
  for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(at::toString(dtype));
    const at::Tensor input = (i * (w.rank + 1)).to(dtype);
    const at::Tensor before = input.clone();
    at::Tensor sum = at::full({mine}, -1, dtype), mx = at::full({mine}, -1, dtype);
    auto ws = comm->reduce_scatter_async(input, counts, sum, dtrain::ReduceOp::kSum);
    auto wm = comm->reduce_scatter_async(input, counts, mx, dtrain::ReduceOp::kMax);
    wm->wait();
    ws->wait();
    const at::Tensor segment = i.narrow(0, offset, mine);
    EXPECT_TRUE(at::equal(sum.to(at::kDouble), segment * tri)) << sum;
    EXPECT_TRUE(at::equal(mx.to(at::kDouble), segment * w.size)) << mx;
    EXPECT_TRUE(at::equal(input, before));
    if (at::isFloatingType(dtype)) {
      at::Tensor avg = at::full({mine}, -1, dtype);
      comm->reduce_scatter_async(input, counts, avg, dtrain::ReduceOp::kAvg)->wait();
      EXPECT_TRUE(at::allclose(avg.to(at::kDouble), segment * tri / w.size, 1e-2, 0)) << avg;
    }
  }
  // Wrong arguments are an Error on the rank that gives them, before anything is sent.
  at::Tensor out = at::empty({mine}, at::kFloat);
  EXPECT_THROW(comm->reduce_scatter_async(at::zeros({total + 1}), counts, out), dtrain::Error);
  EXPECT_THROW(
      comm->reduce_scatter_async(at::zeros({total}), std::vector<int64_t>(w.size + 1, 0), out),
      dtrain::Error);
}

TEST(Communicator, BroadcastFromTheLastRank) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  at::Tensor t = at::full({2, 5}, static_cast<double>(w.rank), at::kDouble);
  comm->broadcast(t, w.size - 1);
  EXPECT_TRUE(at::equal(t, at::full({2, 5}, static_cast<double>(w.size - 1), at::kDouble)));
}

TEST(Communicator, AllGatherIsWorldByShapeInRankOrder) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  const at::Tensor mine = at::full({2, 3}, static_cast<int64_t>(10 * w.rank), at::kLong);
  const at::Tensor all = comm->all_gather(mine);
  ASSERT_EQ(all.sizes(), (at::IntArrayRef{w.size, 2, 3}));
  for (int r = 0; r < w.size; ++r)
    EXPECT_TRUE(at::equal(all[r], at::full({2, 3}, static_cast<int64_t>(10 * r), at::kLong))) << r;
}

TEST(Communicator, GatherStringsInRankOrderWithEmptyAndUnequalLengths) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  const std::string mine(static_cast<size_t>(w.rank), static_cast<char>('a' + w.rank));
  const auto all = dtrain::gather_strings(*comm, mine);
  ASSERT_EQ(all.size(), static_cast<size_t>(w.size));
  for (int r = 0; r < w.size; ++r)
    EXPECT_EQ(all[r], std::string(static_cast<size_t>(r), static_cast<char>('a' + r)));
  const auto empty = dtrain::gather_strings(*comm, "");
  ASSERT_EQ(empty.size(), static_cast<size_t>(w.size));
  for (const auto& s : empty) EXPECT_EQ(s, "");
}

// Rank r sends r * 1000 + 5 values r + i (i = 0, 1, ...); the last rank also more than one
// round of 64 MiB (17 M floats): the root gets each, in rank order, value for value; the others
// nothing. The base class's gather (through all_gather, as the NCCL backend has it) gives the
// same on the root.
TEST(Communicator, GatherToOneRankInRankOrderWithUnequalLengthsAndSeveralRounds) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  auto length = [&](int r) {
    return r == w.size - 1 && w.size > 1 ? int64_t{17} << 20 : r * int64_t{1000} + 5;
  };
  auto values = [&](int r) { return at::arange(length(r), at::kFloat) + r; };
  for (int root : {0, w.size - 1}) {
    SCOPED_TRACE("root " + std::to_string(root));
    const std::vector<at::Tensor> got = comm->gather(values(w.rank), root);
    if (w.rank != root) {
      EXPECT_TRUE(got.empty());
      continue;
    }
    ASSERT_EQ(got.size(), static_cast<size_t>(w.size));
    for (int r = 0; r < w.size; ++r) {
      EXPECT_EQ(got[r].numel(), length(r)) << r;
      EXPECT_TRUE(at::equal(got[r], values(r))) << r;
    }
  }
  const std::vector<at::Tensor> base =
      comm->Communicator::gather(values(w.rank).narrow(0, 0, 5 + w.rank), 0);
  if (w.rank == 0) {
    ASSERT_EQ(base.size(), static_cast<size_t>(w.size));
    for (int r = 0; r < w.size; ++r)
      EXPECT_TRUE(at::equal(base[r], values(r).narrow(0, 0, 5 + r))) << r;
  }
  EXPECT_THROW(comm->gather(at::zeros({2, 2}), 0),
               dtrain::Error);  // not 1-D: refused before any MPI call
}

TEST(Communicator, BadTensorsAndAFailedMpiCallAreErrorsOnEveryRank) {
  const World w;
  auto comm = dtrain::make_mpi_communicator(MPI_COMM_WORLD);
  at::Tensor strided = at::zeros({4, 4}).t();
  at::Tensor undefined;
  at::Tensor ints = at::zeros({3}, at::kLong);
  EXPECT_THROW(comm->all_reduce(strided), dtrain::Error);
  EXPECT_THROW(comm->all_reduce(undefined), dtrain::Error);
  EXPECT_THROW(comm->all_gather(strided), dtrain::Error);
  EXPECT_THROW(comm->broadcast(strided), dtrain::Error);
  EXPECT_THROW(comm->all_reduce(ints, dtrain::ReduceOp::kAvg), dtrain::Error);
  // A root that is no rank: MPI itself refuses the call; the refusal is an Error naming MPI,
  // and the communicator still works afterwards.
  at::Tensor t = at::zeros({3});
  try {
    comm->broadcast(t, w.size + 3);
    if (w.size > 1) ADD_FAILURE() << "a broadcast from root " << w.size + 3 << " did not fail";
  } catch (const dtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Bcast"), std::string::npos) << e.what();
  }
  at::Tensor one = at::ones({1});
  comm->all_reduce(one);
  EXPECT_EQ(one.item<float>(), static_cast<float>(w.size));
}

TEST(Communicator, OwnsADuplicateSoTheCallerMayFreeItsHandle) {
  const World w;
  MPI_Comm split = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, w.rank % 2, w.rank, &split), MPI_SUCCESS);
  auto comm = dtrain::make_mpi_communicator(split);
  MPI_Comm_free(&split);
  const int expect_world = (w.size + 1 - w.rank % 2) / 2;  // ranks of the same parity
  EXPECT_EQ(comm->world(), expect_world);
  EXPECT_EQ(comm->rank(), w.rank / 2);
  at::Tensor t = at::ones({4});
  comm->all_reduce(t);
  EXPECT_TRUE(at::equal(t, at::full({4}, static_cast<float>(expect_world))));
  comm->barrier();
}

}  // namespace
