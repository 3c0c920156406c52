// What a dist test builds for one training run: the config resolved for the communicator's world
// size, its datasets, and a freshly initialized model. The test then makes the Trainer.
//
// The tier runs on CPU ranks through MPI (ctest dist.npN). Given --backend=nccl on a machine with
// a GPU (ctest gpu.nccl.npN, run by launch/gpu.sh test), main() sets up a Runtime with NCCL first
// (so ranks that share the GPU get NCCL's settings, Note [ranks sharing a GPU]); then the tests
// that use nccl_mode() train on the GPU, their N-rank runs with NCCL gradients.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/faults.h"
#include "dtrain/models.h"
#include "fault_injectors.h"  // NanAt, OomOnce, OomAlways, OomAtStartUp

namespace dtrain::test {

// This process's place in MPI_COMM_WORLD.
struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};

inline int world_size() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

// Set by main() from --backend=nccl.
inline bool& nccl_mode() {
  static bool on = false;
  return on;
}
// The device the tests that follow nccl_mode() train on.
inline at::Device test_device() {
  return nccl_mode() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

struct RunSetup {
  Config cfg;
  std::unique_ptr<Communicator> comm;  // MPI: the control plane, and the gradients unless `nccl`
  Splits data;
  std::shared_ptr<Model> model;
  std::unique_ptr<Communicator> nccl;  // NCCL over the same ranks, when asked for
  Communicator& gradients() { return nccl ? *nccl : *comm; }
};

// `init_seed` >= 0 seeds the model's initialization instead of run.seed. `nccl`: gradients
// through NCCL on cuda:0 (nccl_mode() only).
inline RunSetup setup_run(const std::string& yaml, const std::string& origin,
                          const std::vector<std::string>& overrides, MPI_Comm mpi_comm,
                          int64_t init_seed = -1, bool nccl = false) {
  RunSetup s{
      Config::from_string(yaml, origin, overrides), make_mpi_communicator(mpi_comm), {}, {}, {}};
  if (nccl) s.nccl = make_nccl_communicator(mpi_comm, 0);
  s.cfg.resolve(s.comm->world());
  s.data = make_datasets(s.cfg.data, s.cfg.run.seed);
  at::manual_seed(static_cast<uint64_t>(init_seed >= 0 ? init_seed : s.cfg.run.seed));
  s.model = make_model(s.cfg.model.name, s.cfg.model, s.data.train->spec());
  return s;
}

}  // namespace dtrain::test
