#include "session/error_policy.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "util/format.h"
#include "util/live_line.h"

namespace dtrain::detail {
namespace {

// This process's rank and the world size, from MPI while it is up (before the Runtime exists or
// after it failed half-way, too); rank 0 of 1 otherwise.
std::pair<int, int> mpi_place() {
  int init = 0, fin = 0, rank = 0, world = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  }
  return {rank, world};
}

}  // namespace

void print_error_line(int rank, const std::string& what) {
  log::end_live();  // the error on a line of its own, not after the progress line
  std::fflush(stdout);
  std::fprintf(stderr, "[rank %d] error: %s\n", rank, what.c_str());
  std::fflush(stderr);
}

void run_agreed(MPI_Comm comm, const std::function<void()>& body) {
  std::string failure;
  try {
    body();
  } catch (const Error& e) {
    failure = e.what();
  } catch (const c10::Error& e) {
    failure = first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    failure = first_line(e.what());
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const int mine = failure.empty() ? world : rank;
  int first = world;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == world) return;
  int64_t size = rank == first ? static_cast<int64_t>(failure.size()) : 0;
  MPI_Bcast(&size, 1, MPI_INT64_T, first, comm);
  std::string text = rank == first ? failure : std::string(static_cast<size_t>(size), '\0');
  if (size > 0) MPI_Bcast(&text[0], static_cast<int>(size), MPI_CHAR, first, comm);
  if (!failure.empty() && failure != text) print_error_line(rank, failure);
  throw AgreedError(text, {}, first);
}

[[noreturn]] void fail(const std::string& cause, int code, const Runtime* rt) {
  const auto [rank, world] = mpi_place();
  print_error_line(rank, cause);
  if (rt) rt->abort_collectives();
  // Under a launcher that ends the job when a rank exits non-zero (Open MPI's mpirun), a plain
  // exit ends every rank as MPI_Abort would, without its banner and without the help messages
  // that Open MPI 4.1 garbles when ranks abort together ("ORTE_ERROR_LOG: Data unpack would read
  // past end of buffer"). No MPI_Finalize: it would wait for the ranks still in a collective.
  if (world > 1 && rt && rt->exit_ends_job()) {
    std::fflush(stdout);
    std::_Exit(code);
  }
  if (world > 1) MPI_Abort(MPI_COMM_WORLD, code);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
  std::_Exit(code);
}

void report_agreed(const AgreedError& e) {
  const int rank = process_rank() >= 0 ? process_rank() : mpi_place().first;
  if (rank == e.first_rank()) print_error_line(rank, e.what());
  std::fflush(stdout);
}

}  // namespace dtrain::detail
