// The gpu tier's driver: without a CUDA device it prints why and exits 77 (ctest: skipped).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "dtrain/log.h"
#include "dtrain/runtime.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  dtrain::log::configure(0, true);
  if (dtrain::cuda_device_count() == 0) {
    std::printf("gpu tests skipped: no CUDA device is visible%s\n",
                DTRAIN_WITH_CUDA ? "" : " (this dtrain was built without CUDA)");
    MPI_Finalize();
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
