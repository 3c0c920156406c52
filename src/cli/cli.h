// The `dtrain` command: argument handling (--help, --version, --print-config), `dtrain env`,
// `dtrain bench`, `dtrain eval` and `dtrain predict`, and the run under dtrain's error policy
// (run_guarded(), dtrain/session.h: one line per failing rank, then the whole job is aborted so
// that no rank waits forever).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "dtrain/config.h"

namespace dtrain::cli {
// `launcher_env`: the values of Runtime::launcher_variables() and env_variables() (cli/env.h)
// that are set, read by the program before MPI starts (the library itself reads no
// environment). `dtrain env ...` goes to env_main(), `dtrain bench ...` to bench_main(),
// `dtrain eval ...` to eval_main(), `dtrain predict ...` to predict_main().
int main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env);
// Throws dtrain::Error when standard output could not be written (a full disk, a closed pipe):
// what the command prints is its output.
void check_stdout();
// A command line that does not parse: CLI11 prints why (or --help, --version: exit 0); dtrain's
// exit code for it is 2, a usage error (docs/ERRORS.md's table).
constexpr int kExitUsage = 2;
int usage_exit(int cli11_code);

// A command's config. A process started alone (no launcher: world size 1) reads it at once,
// before run_guarded() initializes MPI (for a lone process, Open MPI's singleton start-up: half a
// second), so that a config error comes without that wait, as the same line and exit code as
// under a launcher; under a launcher get() reads it, inside the ranks' agreement (run_agreed).
class EarlyConfig {
 public:
  EarlyConfig(const std::map<std::string, std::string>& launcher_env, std::function<Config()> read);
  // The error line was printed: the command exits 1.
  bool failed() const { return failed_; }
  // The config read early, or read now.
  Config get();

 private:
  std::function<Config()> read_;
  std::optional<Config> early_;
  bool failed_ = false;
};
}  // namespace dtrain::cli
