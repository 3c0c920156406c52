// The files of a trained model that `dtrain eval` and `dtrain predict` read: the weights file
// (--weights, --checkpoint's model.pt, else the run's model.pt) and the preprocess.json that
// records its preprocessing (data/preprocess.h). Each failure is a dtrain::Error naming the
// file or the option.
#pragma once

#include <string>

#include "dtrain/config.h"

namespace dtrain::cli {

// --checkpoint DIR: DIR when it is a checkpoint (it has its COMPLETE marker); else the newest
// complete checkpoint in DIR or in DIR/checkpoints (a run's checkpoints folder, or its run
// directory), as checkpoint.resume auto takes it; else DIR as it is.
std::string checkpoint_of(const std::string& given);

// --weights FILE as it is; --checkpoint DIR: the model.pt of checkpoint_of(DIR), the folder
// checked complete (every file its recorded size and CRC-32); neither: model.pt in the run
// directory (run.dir/run.name).
std::string weights_path(const Config& cfg, const std::string& weights, const std::string& checkpoint);

// preprocess.json beside `weights`, else in the run directory; "" when there is none.
std::string preprocess_path(const Config& cfg, const std::string& weights);

}  // namespace dtrain::cli
