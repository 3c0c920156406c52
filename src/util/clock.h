// The host clock of dtrain's phase times and rates (steady: never jumps with the wall clock).
#pragma once

#include <chrono>

namespace dtrain::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace dtrain::detail
