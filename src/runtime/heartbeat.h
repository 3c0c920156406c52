// Heartbeats: what each rank's watchdog tells the others when one of them fires, over a side
// channel that does not depend on the training thread. Each watchdog thread answers queries on a
// communicator of its own (duplicated from the control communicator, used only by watchdog
// threads, point-to-point and non-blocking); the firing rank asks every other rank for its last
// beat and waits a bounded time, so a rank whose process is frozen or gone is named as not
// answering instead of blocking the report. Needs MPI_THREAD_MULTIPLE (the Runtime asks for it);
// without it the channel is off and the report names this rank only.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::detail {

struct Heartbeat {
  int64_t step = 0;  // the step being worked on (1-based; 0 = before the first step)
  int64_t seq = 0;   // beats since that step began: how far into the step the rank got
  double age_s = 0;  // seconds since the last beat, when it was sent
  char phase[64] = {};
};

// One line for the firing rank `self`: which ranks hold the others up and where the rest wait.
// beats[r] is empty when rank r did not answer within `answer_s` seconds. The ranks behind are
// those that did not answer, else those least far along (step, then beats into it) when the
// ranks are not all at the same place.
std::string describe_stall(const std::vector<std::optional<Heartbeat>>& beats, int self,
                           double answer_s);

class HeartbeatChannel {
 public:
  // Collective over `comm` (MPI_COMM_NULL, or an MPI without MPI_THREAD_MULTIPLE: off).
  explicit HeartbeatChannel(MPI_Comm comm);
  ~HeartbeatChannel();
  HeartbeatChannel(const HeartbeatChannel&) = delete;
  HeartbeatChannel& operator=(const HeartbeatChannel&) = delete;

  bool enabled() const { return comm_ != MPI_COMM_NULL; }
  int rank() const { return rank_; }
  // Answers the queries that have arrived with now(); never blocks.
  void serve(const std::function<Heartbeat()>& now);
  // Every rank's heartbeat (this rank's is now()), waiting at most `deadline_s` for the others
  // and answering their queries meanwhile; empty entries did not answer.
  std::vector<std::optional<Heartbeat>> collect(const std::function<Heartbeat()>& now,
                                                double deadline_s);

 private:
  struct Reply {
    MPI_Request req = MPI_REQUEST_NULL;
    Heartbeat beat;
  };
  void post_query_recv();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  int query_in_ = 0;
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  std::list<Reply> replies_;  // answers in flight (stable addresses for MPI)
};

}  // namespace dtrain::detail
