#include "runtime/heartbeat.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>

namespace dtrain::detail {
namespace {

constexpr int kQueryTag = 1, kReplyTag = 2;

std::string secs(double s) { return std::to_string(static_cast<int64_t>(s + 0.5)) + " s"; }

std::string where(const Heartbeat& b) {
  std::string phase(b.phase, strnlen(b.phase, sizeof(b.phase)));
  return phase + (b.step > 0 ? " at step " + std::to_string(b.step) : " before the first step");
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string describe_stall(const std::vector<std::optional<Heartbeat>>& beats, int self,
                           double answer_s) {
  (void)self;
  std::vector<int> silent, behind;
  std::optional<std::pair<int64_t, int64_t>> lo, hi;
  for (size_t r = 0; r < beats.size(); ++r) {
    if (!beats[r]) {
      silent.push_back(static_cast<int>(r));
      continue;
    }
    const std::pair<int64_t, int64_t> key{beats[r]->step, beats[r]->seq};
    if (!lo || key < *lo) lo = key;
    if (!hi || key > *hi) hi = key;
  }
  if (silent.empty() && lo && *lo < *hi)
    for (size_t r = 0; r < beats.size(); ++r)
      if (std::make_pair(beats[r]->step, beats[r]->seq) == *lo)
        behind.push_back(static_cast<int>(r));

  std::vector<std::string> parts;
  for (int r : silent)
    parts.push_back("rank " + std::to_string(r) + " does not answer (no heartbeat within " +
                    secs(answer_s) + ": its process is gone or frozen)");
  for (int r : behind)
    parts.push_back("rank " + std::to_string(r) + " has not beaten for " + secs(beats[r]->age_s) +
                    " (last phase: " + where(*beats[r]) + ")");
  // The others, grouped by where they wait.
  std::map<std::tuple<int64_t, int64_t, std::string>, std::vector<int>> groups;
  std::map<std::tuple<int64_t, int64_t, std::string>, double> oldest;
  for (size_t r = 0; r < beats.size(); ++r) {
    if (!beats[r] || std::find(behind.begin(), behind.end(), static_cast<int>(r)) != behind.end())
      continue;
    auto key = std::make_tuple(beats[r]->step, beats[r]->seq, where(*beats[r]));
    groups[key].push_back(static_cast<int>(r));
    oldest[key] = std::max(oldest[key], beats[r]->age_s);
  }
  const bool all_together = silent.empty() && behind.empty();
  for (const auto& [key, ranks] : groups)
    parts.push_back(rank_list(ranks) + (ranks.size() == 1 ? " waits" : " wait") + " in " +
                    std::get<2>(key) + " (for " + secs(oldest.at(key)) + ")");
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
  if (all_together && beats.size() > 1)
    s += "; no rank is behind the others (a device, the network or a deadlock in every rank?)";
  return s;
}

HeartbeatChannel::HeartbeatChannel(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  // The decision must be the same on every rank: MPI_Comm_dup is collective.
  if (level < MPI_THREAD_MULTIPLE) return;
  if (MPI_Comm_dup(comm, &comm_) != MPI_SUCCESS) {
    comm_ = MPI_COMM_NULL;
    return;
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_);
  if (world_ > 1) post_query_recv();
}

HeartbeatChannel::~HeartbeatChannel() {
  if (comm_ == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (query_req_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&query_req_);
    MPI_Wait(&query_req_, MPI_STATUS_IGNORE);
  }
  for (auto& r : replies_)
    if (r.req != MPI_REQUEST_NULL) MPI_Request_free(&r.req);
  MPI_Comm_free(&comm_);
}

void HeartbeatChannel::post_query_recv() {
  if (MPI_Irecv(&query_in_, 1, MPI_INT, MPI_ANY_SOURCE, kQueryTag, comm_, &query_req_) !=
      MPI_SUCCESS)
    query_req_ = MPI_REQUEST_NULL;
}

void HeartbeatChannel::serve(const std::function<Heartbeat()>& now) {
  if (comm_ == MPI_COMM_NULL || world_ < 2) return;
  for (auto it = replies_.begin(); it != replies_.end();) {
    int done = 0;
    const bool over = it->req == MPI_REQUEST_NULL ||
                      MPI_Test(&it->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
    if (over)
      it = replies_.erase(it);
    else
      ++it;
  }
  while (query_req_ != MPI_REQUEST_NULL) {
    int arrived = 0;
    MPI_Status st;
    if (MPI_Test(&query_req_, &arrived, &st) != MPI_SUCCESS || !arrived) return;
    Reply& r = replies_.emplace_back();
    r.beat = now();
    MPI_Isend(&r.beat, sizeof(Heartbeat), MPI_BYTE, st.MPI_SOURCE, kReplyTag, comm_, &r.req);
    post_query_recv();
  }
}

std::vector<std::optional<Heartbeat>> HeartbeatChannel::collect(
    const std::function<Heartbeat()>& now, double deadline_s) {
  std::vector<std::optional<Heartbeat>> out(static_cast<size_t>(std::max(1, world_)));
  out[static_cast<size_t>(rank_)] = now();
  if (comm_ == MPI_COMM_NULL || world_ < 2) return out;
  static const int kAsk = 1;
  std::vector<Heartbeat> got(static_cast<size_t>(world_));
  std::vector<MPI_Request> asks(static_cast<size_t>(world_), MPI_REQUEST_NULL);
  std::vector<MPI_Request> answers(static_cast<size_t>(world_), MPI_REQUEST_NULL);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(&got[r], sizeof(Heartbeat), MPI_BYTE, r, kReplyTag, comm_, &answers[r]);
    MPI_Isend(const_cast<int*>(&kAsk), 1, MPI_INT, r, kQueryTag, comm_, &asks[r]);
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  int missing = world_ - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < end) {
    serve(now);  // another rank may be asking at the same time
    for (int r = 0; r < world_; ++r) {
      if (answers[r] == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&answers[r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        out[static_cast<size_t>(r)] = got[r];
        --missing;
      }
    }
    if (missing > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Who did not answer is named; the job is aborted next, so their requests are left as they are.
  return out;
}

}  // namespace dtrain::detail
