// The check behind Runtime::check_launcher, as a pure function of the launcher's variables and
// MPI's numbers (unit-tested): throws dtrain::Error when they disagree.
#pragma once

#include <map>
#include <string>

namespace dtrain::detail {

void check_launch(const std::map<std::string, std::string>& env, int rank, int world,
                  int local_rank);

}  // namespace dtrain::detail
