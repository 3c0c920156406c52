// The dtrain command line: dtrain CONFIG.yaml [section.key=value ...]
// The program, not the library, reads the launcher's variables (mpirun's OMPI_*, srun's SLURM_*),
// before MPI_Init can add any of its own; Runtime::check_launcher compares them with MPI's view,
// and `dtrain env` shows them with a few more (cli::env_variables(): CUDA_VISIBLE_DEVICES, ...).
// An srun task without PMI is refused before MPI_Init, where Open MPI would stop with a message
// of its own (detail::launch_error_before_mpi).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/env.h"
#include "dtrain/runtime.h"
#include "runtime/launch_check.h"

int main(int argc, char** argv) {
  std::map<std::string, std::string> launcher_env;
  std::vector<std::string> names = dtrain::Runtime::launcher_variables();
  for (const auto& name : dtrain::cli::env_variables()) names.push_back(name);  // dtrain env
  for (const auto& name : names)
    if (const char* v = std::getenv(name.c_str())) launcher_env[name] = v;
  const std::string no_pmi = dtrain::detail::launch_error_before_mpi(launcher_env);
  if (!no_pmi.empty()) {
    const auto task = launcher_env.find("SLURM_PROCID");
    std::fprintf(stderr, "[task %s] error: %s\n",
                 task == launcher_env.end() ? "?" : task->second.c_str(), no_pmi.c_str());
    return 1;
  }
  return dtrain::cli::main(argc, argv, launcher_env);
}
