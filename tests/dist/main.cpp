// Test driver for the `dist` tier: runs GoogleTest on every rank of `mpirun -np N`.
// It FAILS (never skips) when MPI setup fails or the world size is not the one ctest asked for;
// the exit code is the worst over all ranks, so a failure on any rank fails the test.
// --backend=nccl (the gpu tier's gpu.nccl.npN): a Runtime sets up NCCL on the GPU for every rank
// first (several ranks on one GPU included: Note [ranks sharing a GPU]), then the tests that
// follow test::nccl_mode() train there; without a CUDA device it exits 77 (skipped), saying why.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <memory>

#include "dist_support.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/runtime.h"

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "dist tests: MPI_Init_thread failed\n");
    return 2;
  }
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  dtrain::detail::set_process_identity(rank, "test");
  dtrain::log::configure(rank, /*quiet=*/true);
  int expect = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--expect-world=", 15) == 0) expect = std::atoi(argv[i] + 15);
    if (std::strcmp(argv[i], "--backend=nccl") == 0) dtrain::test::nccl_mode() = true;
  }
  if (expect > 0 && expect != world) {
    std::fprintf(stderr, "[rank %d] dist tests: expected world size %d, got %d: MPI setup failed\n",
                 rank, expect, world);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::unique_ptr<dtrain::Runtime> nccl_runtime;
  if (dtrain::test::nccl_mode()) {
    if (dtrain::cuda_device_count() == 0) {
      if (rank == 0) std::printf("dist tests --backend=nccl: no CUDA device visible: skipped\n");
      MPI_Finalize();
      return 77;
    }
    dtrain::RunConfig run;
    run.device = dtrain::DeviceKind::kCuda;
    run.threads = 1;
    run.tf32 = false;  // fp32 gradients compared with the formula's tolerance
    dtrain::DistConfig dist;
    dist.backend = dtrain::Backend::kNccl;
    try {
      nccl_runtime = std::make_unique<dtrain::Runtime>(MPI_COMM_WORLD);
      nccl_runtime->setup(run, dist);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] dist tests: NCCL setup failed: %s\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    // Only rank 0 prints the progress; failures on any rank still print and count.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rc != 0) std::fprintf(stderr, "[rank %d] dist tests FAILED on this rank\n", rank);
  nccl_runtime.reset();
  MPI_Finalize();
  return worst;
}
