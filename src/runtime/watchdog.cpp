#include "runtime/watchdog.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dtrain/log.h"

namespace dtrain::detail {

Watchdog::Watchdog(double timeout_s, int rank, MPI_Comm comm)
    : timeout_s_(timeout_s),
      rank_(rank),
      last_(std::chrono::steady_clock::now()),
      channel_(std::make_unique<HeartbeatChannel>(comm)) {
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
  ++seq_;
  last_ = std::chrono::steady_clock::now();
}

void Watchdog::beat(const char* phase, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  step_ = step;
  seq_ = 0;
  last_ = std::chrono::steady_clock::now();
}

void Watchdog::on_fire(std::function<void()> action) {
  std::lock_guard<std::mutex> lock(mu_);
  on_fire_.push_back(std::move(action));
}

Heartbeat Watchdog::heartbeat() {
  Heartbeat b;
  b.step = step_;
  b.seq = seq_;
  b.age_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
  std::strncpy(b.phase, phase_, sizeof(b.phase) - 1);
  return b;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  // Called with mu_ held: the training thread only takes it for a moment in beat().
  const auto now = [this] { return heartbeat(); };
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_) break;
    channel_->serve(now);
    const double idle =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
    if (idle > timeout_s_) fire(idle);
  }
}

void Watchdog::fire(double idle) {
  const auto now = [this] { return heartbeat(); };
  std::string msg = "watchdog: no progress on this rank for " +
                    std::to_string(static_cast<int64_t>(idle)) +
                    " s (run.timeout_s = " + std::to_string(static_cast<int64_t>(timeout_s_)) + ")";
  if (channel_->enabled()) {
    // Long enough for watchdog threads that poll every 100 ms, short next to the timeout.
    const double answer_s = std::clamp(timeout_s_ / 2, 1.0, 10.0);
    msg += ": " + describe_stall(channel_->collect(now, answer_s), rank_, answer_s);
  } else {
    msg += std::string(" in phase '") + phase_ + "'; a peer may have died or hung";
  }
  log::error(msg + "; aborting the job");
  for (auto& action : on_fire_) {
    try {
      action();
    } catch (...) {
    }
  }
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

}  // namespace dtrain::detail
