// Keys a config sets that its run will not read, as the schema says (config/schema.h): a model.*
// key the model did not declare when it registered (models.h), one data format's keys under
// another, one optimizer's keys under another, train.lr_step_size and train.lr_gamma without
// schedule step, train.no_decay_norm_bias without weight decay. Such a run can go on, so each is
// a warning (rank 0, build_session), not an error.
#pragma once

#include <string>
#include <vector>

#include "dtrain/config.h"

namespace dtrain::detail {

// One line per key set (in the file or on the command line) to a value other than its default
// that the run ignores, naming the key, where it was set and why it is not used (a run's own
// config.yaml, which lists every key, read back gives none for the keys it left alone).
std::vector<std::string> unused_keys(const Config& cfg);

}  // namespace dtrain::detail
