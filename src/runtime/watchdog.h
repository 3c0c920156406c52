// Watchdog: ends the whole job when this rank makes no progress for `timeout_s` seconds (a peer
// died inside a collective, a deadlock, a stuck device). The training loop calls beat() at each
// phase (with the step when a new one begins). When it fires, the watchdog asks the other ranks'
// watchdogs for their last beat over a side channel of their own (runtime/heartbeat.h), names the
// rank(s) that stopped answering or hold the others up and where the rest wait, runs the abort
// actions (e.g. ncclCommAbort, so no thread stays in a collective) and aborts the job (exit 3).
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/heartbeat.h"

namespace dtrain::detail {

class Watchdog {
 public:
  // `comm`: the ranks to ask when this one fires (duplicated, a collective over it);
  // MPI_COMM_NULL: no side channel, the message names this rank only.
  Watchdog(double timeout_s, int rank, MPI_Comm comm = MPI_COMM_NULL);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // `phase` is a string literal (the pointer is kept). The second form starts step `step`.
  void beat(const char* phase);
  void beat(const char* phase, int64_t step);
  // Run on the watchdog's thread when it fires, before the job is aborted.
  void on_fire(std::function<void()> action);

 private:
  void loop();
  [[noreturn]] void fire(double idle);
  Heartbeat heartbeat();  // with mu_ held

  double timeout_s_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  const char* phase_ = "start";
  int64_t step_ = 0, seq_ = 0;
  std::chrono::steady_clock::time_point last_;
  std::vector<std::function<void()>> on_fire_;
  std::unique_ptr<HeartbeatChannel> channel_;
  std::thread thread_;
};

}  // namespace dtrain::detail
