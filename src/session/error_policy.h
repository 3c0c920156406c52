// dtrain's error policy, the part behind run_guarded() (dtrain/session.h): how a failure is
// printed and how the job ends. An error every rank reaches together is printed once and the
// job ends with MPI_Finalize and exit 1 on every rank; a rank-local one is printed by that rank
// and ends the job, with an exit that mpirun turns into the end of every rank, or MPI_Abort
// under other launchers, so that no other rank waits for it in a collective.
//
// Note [data errors]: a data error that every rank meets at the same point is agreed, like a
// config error, and printed once: the datasets' files (build_session's run_agreed), the step
// plan against the batch (a training set smaller than one global batch: start_up), the loss
// and the first training sample against the model (check_data_fits, train/loss.h). Such a line
// ends in " (on every rank)" when every rank failed with the same words. An error found while
// the loop loads a batch is one rank's (each rank reads its own samples, at its own time): that
// rank prints its line and ends as fail() says, which under mpirun is a plain exit that mpirun
// turns into the end of every rank, with no MPI_Abort banner.
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
// flight (`rt`, when there is one); when other ranks may wait, exits at once where the launcher
// ends the job on a non-zero exit (Runtime::exit_ends_job: Open MPI's mpirun), else MPI_Abort;
// alone, MPI_Finalize; exits with `code`.
[[noreturn]] void fail(const std::string& cause, int code, const Runtime* rt);

// An AgreedError: printed by its first rank only; the caller then finalizes MPI on every rank
// (destroys the Runtime) and exits 1.
void report_agreed(const AgreedError& e);

}  // namespace dtrain::detail
