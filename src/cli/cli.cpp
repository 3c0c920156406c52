// The `dtrain` command: arguments, --help (the models and every config key), --version,
// --print-config, `dtrain env` (cli/env.h), `dtrain bench` (cli/bench.h), `dtrain eval`
// (cli/eval.h), `dtrain predict` (cli/predict.h), and the run itself through build_session()
// under dtrain's error policy (run_guarded()).
#include "cli/cli.h"
#include "cli/bench.h"
#include "cli/env.h"
#include "cli/eval.h"
#include "cli/predict.h"

#include <sys/stat.h>
#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/session.h"
#include "runtime/launch_check.h"
#include "session/error_policy.h"
#include "util/log_errors.h"
#include "util/spelling.h"

namespace dtrain::cli {
namespace {

std::string help_footer() {
  std::string s =
      "\nRun it under a launcher, one rank per GPU (or CPU slot):\n"
      "  mpirun -np 4 dtrain configs/fashion_mnist.yaml\n"
      "  srun --ntasks-per-node=8 dtrain configs/x.yaml train.lr=3e-4\n"
      "  dtrain configs/fashion_mnist.yaml            (alone: world size 1)\n"
      "\nCheck the machine and the job first (versions, GPUs, launcher, each rank's binding):\n"
      "  dtrain env [CONFIG] [--json]                 (also under mpirun/srun; dtrain env --help)\n"
      "  dtrain bench CONFIG --micro-batches 32,64,128 [--workers 0,2,4] [overrides]\n"
      "\nEvaluate a trained model on the test split (nothing trained, nothing written):\n"
      "  dtrain eval CONFIG [--checkpoint DIR | --weights FILE] [--json] [overrides]\n"
      "\nPredict with a trained model: classes for image files or CSV rows, text from a prompt\n"
      "(only --output is written; dtrain predict --help):\n"
      "  dtrain predict CONFIG [--checkpoint DIR | --weights FILE] --input PATH --output FILE\n"
      "                 [--top-k K] [--prompt TEXT --max-new-tokens N] [--force] [overrides]\n"
      "\nModels:\n";
  for (const auto& [name, desc] : registered_models()) s += "  " + name + ": " + desc + "\n";
  s += "\nConfig keys (YAML sections, or section.key=value on the command line):";
  s += Config::schema_help();
  return s;
}

// Open MPI's mpirun (4.1), sent SIGINT or SIGTERM, sends SIGTERM to every rank, SIGKILLs them
// one second later (odls_base_sigkill_timeout) and returns 1 whatever their exit codes: the
// docs/CHECKPOINTS.md, "Signals", says the same.
const char* kBareMpirunNote =
    "when this SIGTERM came from mpirun (Ctrl-C or SIGTERM to mpirun), mpirun returns 1 whatever "
    "the ranks' exit code, and kills the ranks 1 s after it (a longer checkpoint is lost): stop "
    "with kill -USR1 <mpirun's pid>, or start with launch/mpirun-local.sh, whose Ctrl-C does so "
    "(mpirun then returns 75)";

}  // namespace

// Standard output that could not be written (a full disk, a closed pipe) fails the run: the
// progress lines and the printed config are its output.
void check_stdout() {
  errno = 0;
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  int err = errno ? errno : log::stdout_errno();
  if (failed || err != 0)
    throw Error(std::string("writing standard output failed: ") + std::strerror(err ? err : EIO),
                "stdout");
}

int usage_exit(int cli11_code) { return cli11_code == 0 ? 0 : kExitUsage; }

EarlyConfig::EarlyConfig(const std::map<std::string, std::string>& launcher_env,
                         std::function<Config()> read)
    : read_(std::move(read)) {
  if (detail::launcher_name(launcher_env) != "none") return;
  try {
    early_ = read_();
  } catch (const Error& e) {
    detail::print_error_line(0, e.what());
    failed_ = true;
  }
}

Config EarlyConfig::get() {
  if (!early_) return read_();
  Config c = std::move(*early_);
  early_.reset();
  return c;
}

// --print-config: the config resolved for the launcher's world size (1 alone), on the
// launcher's rank 0; no MPI, no training. stdout holds the config alone, as YAML that loads
// again; the note goes to stderr. An error in the config: one line (rank 0), exit 1.
int print_config_main(const std::string& path, const std::vector<std::string>& overrides,
                      const std::map<std::string, std::string>& launcher_env) {
  const auto [rank, world] = detail::launcher_place(launcher_env);
  try {
    Config cfg = Config::from_file(path, overrides);
    cfg.resolve(world);
    if (rank == 0) {
      std::fputs(cfg.settings_yaml().c_str(), stdout);
      check_stdout();
      std::fprintf(stderr, "# %s (%s)\n", cfg.resolved_note().c_str(), path.c_str());
    }
    return 0;
  } catch (const Error& e) {
    if (rank == 0) std::fprintf(stderr, "[rank 0] error: %s\n", e.what());
    return 1;
  }
}

// A first argument that is no file and looks like a word (no path, no extension, no '=', no
// option) is a mistyped subcommand, not a config file that cannot be opened: "" otherwise.
std::string not_a_subcommand(const std::string& arg, const std::vector<std::string>& subcommands) {
  struct stat st {};
  if (arg.empty() || arg[0] == '-' || arg.find_first_of("/.=") != std::string::npos ||
      ::stat(arg.c_str(), &st) == 0)
    return "";
  std::string names;
  for (size_t i = 0; i < subcommands.size(); ++i)
    names += (i == 0 ? "" : i + 1 == subcommands.size() ? " and " : ", ") + subcommands[i];
  const std::string near = detail::closest(arg, subcommands, 3);
  return "'" + arg + "' is neither a subcommand nor a config file" +
         (near.empty() ? "" : " (did you mean 'dtrain " + near + "'?)") + "; the subcommands are " +
         names +
         ", and training takes a YAML config file: dtrain CONFIG.yaml [section.key=value ...] "
         "(dtrain --help)";
}

int main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env) {
  // The subcommands, each with its entry (env reads its own name; the others start after it).
  const std::vector<std::pair<std::string, std::function<int()>>> subcommands = {
      {"env", [&] { return env_main(argc, argv, launcher_env); }},
      {"bench", [&] { return bench_main(argc - 1, argv + 1, launcher_env); }},
      {"eval", [&] { return eval_main(argc - 1, argv + 1, launcher_env); }},
      {"predict", [&] { return predict_main(argc - 1, argv + 1, launcher_env); }}};
  std::vector<std::string> names;
  for (const auto& [name, entry] : subcommands) {
    if (argc > 1 && name == argv[1]) return entry();
    names.push_back(name);
  }
  if (argc > 1) {
    const std::string wrong = not_a_subcommand(argv[1], names);
    if (!wrong.empty()) {
      if (detail::launcher_place(launcher_env).first == 0)
        std::fprintf(stderr, "[rank 0] error: %s\n", wrong.c_str());
      return kExitUsage;
    }
  }
  CLI::App app{"dtrain: data-parallel training on many GPUs (or CPU ranks)", "dtrain"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  app.add_option("config", config_path, "YAML config file")->required();
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  app.add_flag("--print-config", print_config, "print the resolved config and exit");
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.footer([] { return help_footer(); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app.exit(e));
  }
  if (print_config) return print_config_main(config_path, overrides, launcher_env);
  EarlyConfig config(launcher_env, [&] { return Config::from_file(config_path, overrides); });
  if (config.failed()) return 1;
  install_stop_signals();
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    Config cfg;
    // The config, agreed: a config error that every rank finds is printed once. Then, before
    // anything is read or written: a broken MPI/PMI setup must not start N one-rank runs.
    detail::run_agreed(rt.mpi_comm(), [&] {
      cfg = config.get();
      rt.check_launcher(launcher_env);
    });
    Session s = build_session(rt, std::move(cfg), config_path);
    const TrainSummary summary = s.trainer->fit();
    const int code = exit_code(summary);
    if (code == kExitPreempted && summary.stop_signal == SIGTERM &&
        detail::launcher_name(launcher_env) == "mpirun")
      log::info(kBareMpirunNote);
    check_stdout();
    return code;
  });
}

}  // namespace dtrain::cli
