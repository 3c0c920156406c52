// dtrain::Error: the one exception type dtrain throws for anything a user can act on.
// Invariant: every Error says what failed and, when one is involved, the config key or file
// ("where"); what() is "<where>: <what>". It also records the rank and host it was raised on
// (rank(), host(); -1 and "" before the Runtime exists), for callers that want them. dtrain's
// error policy (run_guarded(), dtrain/session.h) prints one line per failing rank,
// "[rank R] error: <where>: <what>", and aborts the whole job, so an Error never leaves another
// rank waiting; the line names the rank, not the host. An AgreedError is one that every rank
// raised together, after a collective that told each of them: the policy prints it once and
// ends the job without MPI_Abort.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace dtrain {

class Error : public std::runtime_error {
 public:
  // `where` is a config key path ("train.lr"), a file path, or empty.
  explicit Error(const std::string& what, std::string where = {});

  const std::string& cause() const { return cause_; }
  const std::string& where() const { return where_; }
  int rank() const { return rank_; }
  const std::string& host() const { return host_; }

 private:
  std::string cause_;
  std::string where_;
  int rank_;
  std::string host_;
};

// An Error that every rank of the job throws at the same point, after agreeing that some rank
// failed (agree_no_failure, dtrain/comm.h; the session's agreed phases): `first_rank` is the
// lowest rank that failed, and its message is this one. The error policy prints it on that
// rank alone and every rank finalizes MPI and exits 1: no rank is waiting in a collective.
class AgreedError : public Error {
 public:
  AgreedError(const std::string& what, std::string where, int first_rank)
      : Error(what, std::move(where)), first_rank_(first_rank) {}
  int first_rank() const { return first_rank_; }

 private:
  int first_rank_;
};

namespace detail {
// The rank and host of this process, set once by Runtime; -1 / "" before MPI is up.
void set_process_identity(int rank, const std::string& host);
int process_rank();
const std::string& process_host();
}  // namespace detail

}  // namespace dtrain
