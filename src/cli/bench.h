// `dtrain bench CONFIG [section.key=value ...] [--micro-batches 32,64] [--workers 0,2] ...`: the
// micro-batch and loader-workers sweep (src/bench/), with its arguments and output files.
#pragma once

#include <map>
#include <string>

namespace dtrain::cli {
// `argv[0]` is "bench"; `launcher_env` as for cli::main.
int bench_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env);
}  // namespace dtrain::cli
