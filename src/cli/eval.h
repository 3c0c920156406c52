// `dtrain eval CONFIG [section.key=value ...] [--checkpoint DIR | --weights FILE] [--json]`: the
// test split evaluated with the metrics training reports (loss, accuracy, top-5 accuracy), from
// the run's model.pt (run.dir/run.name/model.pt), a checkpoint's model.pt or a weights file; on
// any number of ranks (every test sample once, summed over ranks); nothing trained, nothing
// written.
#pragma once

#include <map>
#include <string>

namespace dtrain::cli {
// `argv[0]` is "eval"; `launcher_env` as for cli::main.
int eval_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env);
}  // namespace dtrain::cli
