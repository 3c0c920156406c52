// The `dtrain` command: arguments, --help (the models and every config key), --version, and the
// run itself through build_session() under dtrain's error policy (run_guarded()).
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/models.h"
#include "dtrain/session.h"

namespace dtrain::cli {
namespace {

std::string help_footer() {
  std::string s =
      "\nRun it under a launcher, one rank per GPU (or CPU slot):\n"
      "  mpirun -np 4 dtrain configs/fashion_mnist.yaml\n"
      "  srun --ntasks-per-node=8 dtrain configs/x.yaml train.lr=3e-4\n"
      "  dtrain configs/fashion_mnist.yaml            (alone: world size 1)\n"
      "\nModels:\n";
  for (const auto& [name, desc] : registered_models()) s += "  " + name + ": " + desc + "\n";
  s += "\nConfig keys (YAML sections, or section.key=value on the command line):";
  s += Config::schema_help();
  return s;
}

}  // namespace

int main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env) {
  CLI::App app{"dtrain: data-parallel training on many GPUs (or CPU ranks)", "dtrain"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  app.add_option("config", config_path, "YAML config file")->required();
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  app.add_flag("--print-config", print_config, "print the resolved config and exit");
  app.set_version_flag("--version", version_text());
  app.footer([] { return help_footer(); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!print_config) install_stop_signals();
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    // Before anything is read or written: a broken MPI/PMI setup must not start N one-rank runs.
    rt.check_launcher(launcher_env);
    Session s = build_session(rt, Config::from_file(config_path, overrides), config_path,
                              /*config_only=*/print_config);
    return s.trainer ? exit_code(s.trainer->fit()) : 0;
  });
}

}  // namespace dtrain::cli
