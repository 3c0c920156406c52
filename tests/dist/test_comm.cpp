// The MPI Communicator against what include/dtrain/comm.h promises: results by formula for each
// collective and dtype, rank order, a failed collective as a dtrain::Error on every rank (so the
// caller can end the job), and a duplicated communicator (the caller may free its own handle).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "dist_support.h"

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
