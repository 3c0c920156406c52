// dtrain's error policy, the part behind run_guarded() (dtrain/session.h): how a failure is
// printed and how the job ends. An error every rank reaches together is printed once and the
// job ends with MPI_Finalize and exit 1 on every rank; a rank-local one is printed by that rank
// and ends the job with MPI_Abort, so that no other rank waits for it in a collective.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

#include "dtrain/error.h"
#include "dtrain/runtime.h"

namespace dtrain::detail {

// "[rank R] error: <what>" on stderr, on a line of its own (the live progress line ended first).
void print_error_line(int rank, const std::string& what);

// Runs `body` on every rank of `comm`, then agrees (a collective over `comm`: every rank calls
// it, and `body` runs no collective) whether it failed on any rank. When it did, every rank
// throws the same AgreedError: the message of the lowest rank that failed. A failing rank whose
// own message differs from it prints its own line first, so each distinct error is shown once.
void run_agreed(MPI_Comm comm, const std::function<void()>& body);

// Ends the job for an error on this rank: prints its line, abandons this rank's collectives in
// flight (`rt`, when there is one), MPI_Abort when other ranks may wait, else MPI_Finalize;
// exits with `code`.
[[noreturn]] void fail(const std::string& cause, int code, const Runtime* rt);

// An AgreedError: printed by its first rank only; the caller then finalizes MPI on every rank
// (destroys the Runtime) and exits 1.
void report_agreed(const AgreedError& e);

}  // namespace dtrain::detail
