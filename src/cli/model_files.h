// The files of a trained model that `dtrain eval` and `dtrain predict` read: the weights file
// (--weights, --checkpoint's model.pt, else the run's model.pt) and the preprocess.json that
// records its preprocessing (data/preprocess.h). Each failure is a dtrain::Error naming the
// file or the option.
#pragma once

#include <string>
#include <vector>

#include "dtrain/config.h"

namespace dtrain::cli {

// `dtrain eval RUN_DIR` and `dtrain predict RUN_DIR`: a folder holding config.yaml given as the
// config is a run directory: its config.yaml (the run's own settings, every override it trained
// with), with run.dir and run.name set to the folder (put before the command line's `overrides`,
// which still win), so its model.pt, checkpoints and preprocess.json are found wherever the
// folder now lies (unless `overrides` set run.dir or run.name). Anything else: `given` as it is.
std::string run_config(const std::string& given, std::vector<std::string>& overrides);

// --checkpoint DIR: DIR when it is a checkpoint (it has its COMPLETE marker); else the newest
// complete checkpoint in DIR or in DIR/checkpoints (a run's checkpoints folder, or its run
// directory), as checkpoint.resume auto takes it; else DIR as it is.
std::string checkpoint_of(const std::string& given);

// --weights FILE as it is; --checkpoint DIR: the model.pt of checkpoint_of(DIR), the folder
// checked complete (every file its recorded size and CRC-32); neither: model.pt in the run
// directory (run.dir/run.name).
std::string weights_path(const Config& cfg, const std::string& weights,
                         const std::string& checkpoint);

// preprocess.json beside `weights`, else in the run directory; "" when there is none.
std::string preprocess_path(const Config& cfg, const std::string& weights);

}  // namespace dtrain::cli
