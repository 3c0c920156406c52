// The host clocks: the steady one of dtrain's phase times and rates (never jumps with the wall
// clock), and the wall clock of the records' timestamps (unix_now).
#pragma once

#include <chrono>

namespace dtrain::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds since the Unix epoch, by the wall clock (metrics, TensorBoard and timeline timestamps).
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace dtrain::detail
