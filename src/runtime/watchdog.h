// Watchdog: ends the whole job when this rank makes no progress for `timeout_s` seconds (a peer
// died inside a collective, a deadlock, a stuck device). The training loop calls beat() at each
// phase; the message names the rank and the phase it was stuck in.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace dtrain {

class Watchdog {
 public:
  Watchdog(double timeout_s, int rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void beat(const char* phase);

 private:
  void loop();
  double timeout_s_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  const char* phase_ = "start";
  std::chrono::steady_clock::time_point last_;
  std::thread thread_;
};

}  // namespace dtrain
