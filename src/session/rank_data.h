// Every rank's data, as its log line describes it (Dataset::describe()), against rank 0's: the
// log shows rank 0's line only, so a rank whose data differs in what the sizes check does not
// see (data.decode auto choosing another decoder on a host with fewer CPUs, another nvJPEG,
// another folder of the same size) would go unnoticed. build_session gathers the lines and rank 0
// warns with this.
#pragma once

#include <string>
#include <vector>

namespace dtrain::detail {

// One warning per distinct line that differs from rank 0's (lines[0]), naming the ranks that
// have it: "the data of rank 3 differs from rank 0's: rank 3: <line>; rank 0: <line>". None when
// every rank's line is rank 0's.
std::vector<std::string> data_differences(const std::vector<std::string>& lines);

}  // namespace dtrain::detail
