// Stop signals: what install_stop_signals() (dtrain/runtime.h) records. The handler only stores
// the first SIGTERM, SIGUSR1 or SIGINT (a lock-free atomic, async-signal-safe); a second SIGINT
// ends the process at once. The signal hook (hooks/signal_stop.cpp) reads it after every step and
// every evaluation and asks to save and stop; the loop agrees on that with every rank (Note [hook
// requests]).
#pragma once

namespace dtrain::detail {

// The first stop signal this process received since the handlers were installed; 0 for none.
int stop_signal();
// "SIGTERM", "SIGUSR1", "SIGINT", or "a signal" for any other.
const char* signal_name(int sig);
// For tests: forget a received signal.
void clear_stop_signal();
// The run has ended and its exit code is known (75 after a stop): from here on the stop signals
// are ignored, where install_stop_signals() handles them, so that a second Ctrl-C while MPI
// finalizes cannot turn that code into death by SIGINT (launch/mpirun-output.sh passes a second
// Ctrl-C to the ranks). Handlers of the program's own are left as they are.
void ignore_stop_signals();

}  // namespace dtrain::detail
