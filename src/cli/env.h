// `dtrain env`: what this machine and this job give dtrain (versions, GPUs, launcher, each rank's
// binding), with hints for what is wrong. Under mpirun every rank reports to rank 0.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dtrain::cli {

// The variables `dtrain env` shows beyond Runtime::launcher_variables(); the program reads them
// (src/cli/main.cpp) and hands them in with the launcher's.
std::vector<std::string> env_variables();

// `dtrain env [CONFIG [section.key=value ...]] [--json]` (argv[1] is "env"): prints the facts
// on rank 0, as text or JSON; returns 1 on every rank when something would stop training, else 0.
// A config, when given, supplies run.device and run.threads.
int env_main(int argc, char** argv, const std::map<std::string, std::string>& env);

}  // namespace dtrain::cli
