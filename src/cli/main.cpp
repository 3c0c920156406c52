// The dtrain command line: dtrain CONFIG.yaml [section.key=value ...]
// The program, not the library, reads the launcher's variables (mpirun's OMPI_*, srun's SLURM_*),
// before MPI_Init can add any of its own; Runtime::check_launcher compares them with MPI's view,
// and `dtrain env` shows them with a few more (cli::env_variables(): CUDA_VISIBLE_DEVICES, ...).
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/env.h"
#include "dtrain/runtime.h"

int main(int argc, char** argv) {
  std::map<std::string, std::string> launcher_env;
  std::vector<std::string> names = dtrain::Runtime::launcher_variables();
  for (const auto& name : dtrain::cli::env_variables()) names.push_back(name);  // dtrain env
  for (const auto& name : names)
    if (const char* v = std::getenv(name.c_str())) launcher_env[name] = v;
  return dtrain::cli::main(argc, argv, launcher_env);
}
