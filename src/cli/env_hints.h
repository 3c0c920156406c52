// What `dtrain env` finds wrong with a rank's setup, in plain words: problems that would stop
// training (the command then exits 1) and advice that would not (exit 0). A pure function of
// the facts (cli/env_facts.h), unit-tested rule by rule.
#pragma once

#include <string>
#include <vector>

#include "cli/env_facts.h"
#include "dtrain/config.h"

namespace dtrain::cli {

struct Hint {
  bool stops = false;  // training would stop (exit 1); else advice
  std::string text;
};

// `device`: run.device of the config given to `dtrain env` (auto without one).
std::vector<Hint> env_hints(const MachineFacts& m, const RankFacts& r, DeviceKind device);

}  // namespace dtrain::cli
