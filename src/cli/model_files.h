// The files of a trained model that `dtrain eval` and `dtrain predict` read: the weights file
// (--weights, --checkpoint's model.pt, else the run's model.pt) and the preprocess.json that
// records its preprocessing (data/preprocess.h). Each failure is a dtrain::Error naming the
// file or the option.
#pragma once

#include <string>

#include "dtrain/config.h"

namespace dtrain::cli {

// --weights FILE as it is; --checkpoint DIR: its model.pt, the folder checked complete (every
// file its recorded size and CRC-32); neither: model.pt in the run directory
// (run.dir/run.name).
std::string weights_path(const Config& cfg, const std::string& weights, const std::string& checkpoint);

// preprocess.json beside `weights`, else in the run directory; "" when there is none.
std::string preprocess_path(const Config& cfg, const std::string& weights);

}  // namespace dtrain::cli
