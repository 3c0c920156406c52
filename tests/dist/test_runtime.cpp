// Runtime under mpirun: the rank facts every rank reports, the local numbering of ranks on a
// node, the device a rank binds, the communicators, and the identity every Error carries.
#include <gtest/gtest.h>
#include <mpi.h>

#include <set>
#include <string>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/runtime.h"

namespace dtrain {
namespace {

TEST(Runtime, EveryRankReportsTheSameWorldAndItsPlaceOnTheNode) {
  int mpi_rank = 0, mpi_world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_world);
  Runtime rt(MPI_COMM_WORLD);
  EXPECT_EQ(rt.rank(), mpi_rank);
  EXPECT_EQ(rt.world(), mpi_world);
  EXPECT_FALSE(rt.host().empty());
  // All ranks of this test run on one machine: one node, numbered 0..world-1 in rank order.
  EXPECT_EQ(rt.local_world(), mpi_world);
  EXPECT_EQ(rt.local_rank(), mpi_rank);
  // An Error raised now names this rank and host.
  const Error e("x");
  EXPECT_EQ(e.rank(), mpi_rank);
  EXPECT_EQ(e.host(), rt.host());
}

TEST(Runtime, BindsTheCpuOrGpuLocalRankAndMakesTheCommunicators) {
  Runtime rt(MPI_COMM_WORLD);
  RunConfig run;
  run.threads = 1;
  DistConfig dist;
  run.device = DeviceKind::kCpu;
  rt.setup(run, dist);
  EXPECT_FALSE(rt.on_cuda());
  EXPECT_EQ(rt.comm().backend(), "mpi");
  EXPECT_EQ(rt.comm().world(), rt.world());
  EXPECT_EQ(rt.cpu_comm().backend(), "mpi");

  Runtime gpu(MPI_COMM_WORLD);
  run.device = DeviceKind::kCuda;
  dist.backend = Backend::kMpi;
  if (cuda_device_count() == 0) {
    try {
      gpu.setup(run, dist);
      FAIL() << "run.device=cuda without a GPU was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.where(), "run.device") << err.what();
    }
  } else {
    gpu.setup(run, dist);
    EXPECT_TRUE(gpu.on_cuda());
    EXPECT_EQ(gpu.device().index(), gpu.local_rank() % cuda_device_count());
  }
}

TEST(Runtime, TheControlCommunicatorServesBeforeSetupAndSetupMayRunAgain) {
  // Before setup(): agreements use cpu_comm(), made on first use (dtrain bench's output check).
  Runtime rt(MPI_COMM_WORLD);
  at::Tensor one = at::ones({1}, at::kLong);
  rt.cpu_comm().all_reduce(one);
  EXPECT_EQ(one.item<int64_t>(), rt.world());
  RunConfig run;
  run.threads = 1;
  run.device = DeviceKind::kCpu;
  DistConfig dist;
  // Once per setting, as dtrain bench does: the communicators are made anew and both work.
  for (int setting = 0; setting < 2; ++setting) {
    rt.setup(run, dist);
    EXPECT_EQ(rt.cpu_comm().backend(), "mpi");
    for (Communicator* c : {&rt.comm(), &rt.cpu_comm()}) {
      at::Tensor rank = at::full({1}, rt.rank(), at::kLong);
      c->all_reduce(rank);
      EXPECT_EQ(rank.item<int64_t>(), static_cast<int64_t>(rt.world()) * (rt.world() - 1) / 2);
    }
  }
}

}  // namespace
}  // namespace dtrain
