#include "runtime/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "dtrain/runtime.h"

namespace dtrain {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig) && sig == SIGINT) {
    // A second Ctrl-C: the user does not want to wait for the checkpoint.
    static const char msg[] = "dtrain: second interrupt, ending now without a checkpoint\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::signal(SIGINT, SIG_DFL);
    ::raise(SIGINT);
  }
}

}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls elsewhere (MPI, reads) carry on
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
}

namespace detail {

int stop_signal() { return g_signal.load(); }
void clear_stop_signal() { g_signal.store(0); }

void ignore_stop_signals() {
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) {
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler == on_stop_signal)
      ::signal(sig, SIG_IGN);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

}  // namespace detail
}  // namespace dtrain
