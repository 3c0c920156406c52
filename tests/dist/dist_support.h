// What a dist test builds for one training run: the config resolved for the communicator's world
// size, its datasets, and a freshly initialized model. The test then makes the Trainer.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"

namespace dtrain::test {

// This process's place in MPI_COMM_WORLD.
struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};

struct RunSetup {
  Config cfg;
  std::unique_ptr<Communicator> comm;
  Splits data;
  std::shared_ptr<Model> model;
};

// `init_seed` >= 0 seeds the model's initialization instead of run.seed.
inline RunSetup setup_run(const std::string& yaml, const std::string& origin,
                          const std::vector<std::string>& overrides, MPI_Comm mpi_comm,
                          int64_t init_seed = -1) {
  RunSetup s{Config::from_string(yaml, origin, overrides), make_mpi_communicator(mpi_comm), {}, {}};
  s.cfg.resolve(s.comm->world());
  s.data = make_datasets(s.cfg.data, s.cfg.run.seed);
  at::manual_seed(static_cast<uint64_t>(init_seed >= 0 ? init_seed : s.cfg.run.seed));
  s.model = make_model(s.cfg.model.name, s.cfg.model, s.data.train->spec());
  return s;
}

}  // namespace dtrain::test
