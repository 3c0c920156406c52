// Stop signals: what install_stop_signals() (dtrain/session.h) records. The handler only stores
// the signal (async-signal-safe); the training loop's signal hook reads it at every step boundary
// and asks every rank to save and stop (Note [hook requests]).
#pragma once

namespace dtrain::detail {

// The first stop signal this process received since the handlers were installed; 0 for none.
int stop_signal();
// "SIGTERM", "SIGUSR1", "SIGINT", or "signal N".
const char* signal_name(int sig);
// For tests: forget a received signal.
void clear_stop_signal();

}  // namespace dtrain::detail
