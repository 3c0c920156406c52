#include "runtime/watchdog.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "dtrain/log.h"

namespace dtrain {

Watchdog::Watchdog(double timeout_s, int rank)
    : timeout_s_(timeout_s), rank_(rank), last_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::beat(const char* phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  last_ = std::chrono::steady_clock::now();
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    const double idle =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
    if (idle > timeout_s_) {
      log::error("no progress for " + std::to_string(static_cast<int>(idle)) + " s in phase '" +
                 phase_ + "' (run.timeout_s = " + std::to_string(static_cast<int64_t>(timeout_s_)) +
                 "); a peer may have died or hung; aborting the job");
      MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);
    }
  }
}

}  // namespace dtrain
