// What the logger saw go wrong with its own output: the errno of the first failed write (or
// flush) to standard output, for the caller that decides whether the run's output was lost.
#pragma once

namespace dtrain::log {

// errno of the first failed write or flush of stdout by the logger; 0 when none failed.
int stdout_errno();

}  // namespace dtrain::log
