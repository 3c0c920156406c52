// The dtrain command line: dtrain CONFIG.yaml [section.key=value ...]
// The program, not the library, reads the launcher's variables (mpirun's OMPI_*, srun's SLURM_*),
// before MPI_Init can add any of its own; Runtime::check_launcher compares them with MPI's view,
// and `dtrain env` shows them with a few more (cli::env_variables(): CUDA_VISIBLE_DEVICES, ...).
// An srun task without PMI is refused before MPI_Init, where Open MPI would stop with a message
// of its own (detail::launch_error_before_mpi). A process started alone runs as Open MPI's
// isolated singleton (OMPI_MCA_ess_singleton_isolated=1, unless the environment says otherwise):
// no supporting daemon is forked, which dtrain never needs (it spawns no processes), and the
// start takes 0.9 s instead of 1.1-1.4 (a short run on the 2-core machine).
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
  if (dtrain::detail::launcher_name(launcher_env) == "none")
    ::setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  return dtrain::cli::main(argc, argv, launcher_env);
}
