// The scaling forecast: the step time and the scaling efficiency a run would have on N ranks
// joined by a given link, from the run's own measurements (Note [scaling forecast]). A pure
// function of plain numbers (no LibTorch), so that hand-made timelines test it
// (tests/unit/test_forecast.cpp); the report hook (src/hooks/report.cpp) and `dtrain bench
// --forecast` (src/bench/scaling.h) gather the numbers, and the text says what the forecast
// assumes, every time it is printed.
//
// Note [scaling forecast]: data parallelism on N ranks is the one-rank step plus the gradients'
// collectives, so the forecast takes from the run: its mean step time S; of it, the
// communication phase C (PhaseTimes::comm: the wait after backward for the gradient buckets,
// and the step's agreement); and a step's bucket timeline, each bucket's bytes s_b and when it
// was handed to the collectives, l_b (when its gradients were ready, in plan order; after
// backward with dist.overlap=false), and the end of backward E, in seconds from the backward's
// start. On N ranks over a link each bucket's collective takes
//   t_b = lat(N) + f(N) s_b / B,
// B the link's bus bandwidth as nccl-tests defines it and f(N) the share of the bytes each rank
// sends in NCCL's ring: 2(N-1)/N for an all-reduce, (N-1)/N for a reduce-scatter (the buckets
// of dist.shard_optimizer), 1 for a broadcast (the wire bytes of TrainSummary count the same);
// lat(N) is NCCL's own latency model of its ring (Simple protocol, src/graph/tuning.cc): a base
// latency, plus one per ring step, 2(N-1) steps for an all-reduce, N-1 for a reduce-scatter,
// those that cross nodes at the network's latency. The collectives run one at a time in plan
// order (one NCCL stream; MPI's one thread), bucket b from max(l_b, the end of bucket b-1); what
// ends after backward is exposed: X(N) = max(0, end of the last bucket - E). Nothing hides a
// sharded optimizer's N broadcasts of the updated parameters after the step, nor the step's
// agreement (one small all-reduce), so they add in full. The forecast step is
//   S(N) = S - C + X(N) + broadcasts(N) + agreement(N),
// S - C the step without communication (the one-rank step), and the efficiency (S - C) / S(N):
// weak scaling, every rank keeping its batch. The overlap comes from the timeline only where
// the host clock says when gradients were ready: on CPU ranks. On CUDA the host clock says when
// the work was queued, which can be long before the GPU runs it, so there the forecast is a
// range: no overlap (every bucket after backward) to an ideal one (only the last bucket after
// backward, the rest hidden). Without a timeline (one rank without the gradient engine, a CUDA
// graph from the first step) the gradients go as one collective after backward: no overlap, the
// step's upper bound. What this leaves out is printed as the forecast's assumptions
// (forecast_text): compute unchanged by N (no straggler, no contention for a host's cores), a
// bus bandwidth reached at every bucket size, NCCL's ring (its tree and NVLS algorithms can be
// faster), the loader keeping up as on one rank, SyncBatchNorm's collectives not counted.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/records.h"

namespace dtrain::detail {

enum class Collective { kAllReduce, kReduceScatter, kBroadcast };

// An interconnect as NCCL's cost model of its ring sees it: a bus bandwidth and latencies.
struct Link {
  std::string name;              // "nvlink", "infiniband", "measured", or --link's name=
  std::string what;              // what it stands for and where its numbers come from
  double bus_bandwidth = 0;      // bytes/s of a ring inside one node (nccl-tests' bus bandwidth)
  double net_bus_bandwidth = 0;  // bytes/s of a ring that crosses nodes
  double base_latency = 0;       // seconds, once per collective
  double step_latency = 0;       // seconds per ring step inside a node
  double net_step_latency = 0;   // seconds per ring step that crosses nodes
  int ranks_per_node = 0;        // 0: every rank of the forecast on one node
  std::vector<int> ranks;        // the world sizes forecast over this link
};

// The named presets, in this order: "nvlink" (2, 4 and 8 GPUs of one H100/H200 node) and
// "infiniband" (16, 32 and 64 GPUs: 2, 4 and 8 such nodes over NDR InfiniBand).
const std::vector<Link>& link_presets();

// --link's text: a preset's name, "measured" (returned with no numbers: the bench fills it), or
// comma-separated key=value pairs after an optional preset name: name, bus and net_bus (GB/s),
// base_us, step_us and net_step_us (microseconds), per_node, ranks (N/N/...). A link that is not
// a preset needs bus and step_us (its ranks 2/4/8 on one node unless given). Anything else is an
// Error naming --link and the entry.
Link parse_link(const std::string& text);

int ring_steps(Collective c, int ranks);     // 2(N-1), N-1, 1
double bus_factor(Collective c, int ranks);  // 2(N-1)/N, (N-1)/N, 1
int nodes_for(const Link& link, int ranks);  // ceil(N / ranks_per_node), 1 without
double latency_seconds(Collective c, int ranks, const Link& link);
// One collective of `bytes` (each rank's buffer) on `ranks` ranks: lat(N) + f(N) bytes / B.
double collective_seconds(Collective c, double bytes, int ranks, const Link& link);

// The link that reproduces measured collectives on `ranks` ranks: (bytes, seconds) pairs, each
// one collective's time, fitted as t = a + f(N) bytes / B by least squares of the relative error
// (small and large sizes count alike); a goes to the ring's steps (step_latency = a / steps),
// a negative a is 0. Fewer than 2 sizes, or no growth with size: an Error.
Link fit_link(Collective c, int ranks, const std::vector<std::pair<double, double>>& samples,
              const std::string& what);

// What the run measured (Note [scaling forecast]).
struct ScalingInput {
  int world = 1;      // the run's ranks
  double step = 0;    // seconds, the mean step
  double comm = 0;    // seconds per step of it in the communication phase
  int64_t batch = 0;  // samples per rank and step (for the text)
  // A step's buckets in plan order (bytes, launched; a mean over steps: TimelineMean) and the end
  // of backward, seconds from its start; empty: no timeline.
  std::vector<BucketTiming> buckets;
  double backward_end = 0;
  bool on_cuda = false;  // the timeline's times are when work was queued: a range
  Collective gradients = Collective::kAllReduce;  // kReduceScatter with dist.shard_optimizer
  int64_t gradient_bytes = 0;   // the gradients as sent, when there is no timeline
  int64_t broadcast_bytes = 0;  // dist.shard_optimizer: the parameters' bytes gathered each step
};

enum class Overlap { kMeasured, kRange, kNone };

struct ForecastRow {
  std::string link;
  int ranks = 0, nodes = 1;
  double collectives = 0;  // seconds per step in collectives, hidden or not
  double exposed = 0;      // seconds per step not hidden (gradients after backward, broadcasts,
                           // agreement); with a range, its upper end (no overlap)
  double exposed_low = 0;  // the range's lower end (ideal overlap); = exposed otherwise
  double step = 0, step_low = 0;
  double efficiency = 0, efficiency_high = 0;
};

struct Forecast {
  double one_rank_step = 0;  // S - C
  Overlap overlap = Overlap::kNone;
  std::vector<ForecastRow> rows;  // per link, per world size
};

// The collectives of `durations` launched at `launch` (plan order), one at a time: how long the
// last one ends after `backward_end` (0 when before).
double exposed_after(const std::vector<double>& launch, const std::vector<double>& durations,
                     double backward_end);

Forecast forecast(const ScalingInput& in, const std::vector<Link>& links);

// The mean bucket timeline over steps (launched, ready, done and the end of backward per
// bucket); a step whose buckets differ in count or bytes from the last ones (the plan rebuilt
// after the first step) starts the mean again.
class TimelineMean {
 public:
  void add(const std::vector<BucketTiming>& buckets, double backward_end);
  int64_t steps() const { return steps_; }
  std::vector<BucketTiming> buckets() const;
  double backward_end() const { return steps_ > 0 ? backward_end_ / steps_ : 0.0; }

 private:
  std::vector<BucketTiming> sum_;
  double backward_end_ = 0;
  int64_t steps_ = 0;
};

// The forecast as text, one line each: what it is computed from, the table (link, GPUs, nodes,
// collectives, exposed, step, efficiency; a range where the overlap is not measured), the links'
// numbers and the assumptions. `source` names the measurement ("rank 0's last 20 steps").
std::vector<std::string> forecast_text(const ScalingInput& in, const Forecast& f,
                                       const std::vector<Link>& links, const std::string& source);
// One line for the log: the largest world of each link and its efficiency.
std::string forecast_line(const Forecast& f);

}  // namespace dtrain::detail
