#include "telemetry/forecast.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

constexpr double kGigabyte = 1e9;
constexpr double kMicrosecond = 1e-6;
// NCCL multiplies a multi-node ring all-reduce's latency by 1.4 on Ampere and later GPUs (the
// ring's "plateau effect", ncclTopoGetAlgoTime in src/graph/tuning.cc).
constexpr double kNetAllReducePlateau = 1.4;
// The step's agreement (the out-of-memory flag every step): one all-reduce of this many bytes.
constexpr double kAgreementBytes = 8;

// The presets' numbers and where they come from.
//
// Latencies: NCCL's cost model of its ring with the Simple protocol (the protocol of large
// messages), src/graph/tuning.cc of NCCL 2.19 and later: baseLat 8.4 us per collective, hwLat
// 3.4 us per ring step over NVLink and 14 us per step over the network (Ring/Simple).
//
// Bandwidths are nccl-tests' bus bandwidth (nccl-tests doc/PERFORMANCE.md: the algorithm
// bandwidth times 2(N-1)/N for an all-reduce, (N-1)/N for reduce-scatter and all-gather, which
// makes it comparable to the hardware's link speed at any N).
//  - nvlink: all_reduce_perf on 8 H200 (NVLink 4 through NVSwitch) reaches about 220 GB/s at
//    16 MiB, 276 at 32 MiB, 436 at 256 MiB and about 480 at the largest sizes
//    (docs/PERFORMANCE.md, "Several ranks and the gradient engine"); 8 H100 SXM reach 460-480
//    at large sizes. With the latency above, 360 GB/s reproduces the 16 and 32 MiB points within
//    4%, the size of dtrain's buckets (dist.bucket_cap_mb 25), and takes up to a third longer
//    than measured at 1 MiB and 256 MiB: pessimistic there.
//  - infiniband: NDR is 400 Gb/s = 50 GB/s per port; NCCL reaches about 90% of it, 45 GB/s, on
//    a ring whose every crossing between nodes goes through one NIC (one NIC per node, or per
//    ring). Nodes with one NIC per GPU (DGX/HGX H100) spread NCCL's rings over their NICs and
//    can reach several times this: the preset is the conservative end; give a cluster's own
//    all_reduce_perf figure with --link infiniband,net_bus=GBPS.
std::vector<Link> make_presets() {
  Link nvlink;
  nvlink.name = "nvlink";
  nvlink.what =
      "NVLink 4 through NVSwitch (H100/H200 SXM, 8 GPUs a node): 360 GB/s bus bandwidth "
      "(all_reduce_perf on 8 H200 at 16-32 MiB), 8.4 us + 3.4 us a ring step (NCCL's latency "
      "model)";
  nvlink.bus_bandwidth = nvlink.net_bus_bandwidth = 360 * kGigabyte;
  nvlink.base_latency = 8.4 * kMicrosecond;
  nvlink.step_latency = 3.4 * kMicrosecond;
  nvlink.net_step_latency = 14 * kMicrosecond;
  nvlink.ranks_per_node = 8;
  nvlink.ranks = {2, 4, 8};
  Link ib = nvlink;
  ib.name = "infiniband";
  ib.what =
      "nodes of 8 such GPUs over NDR InfiniBand (400 Gb/s): 45 GB/s bus bandwidth across nodes "
      "(90% of one NIC: conservative where each GPU has its own), 14 us a ring step between "
      "nodes, all-reduce latency x1.4 (NCCL's model)";
  ib.net_bus_bandwidth = 45 * kGigabyte;
  ib.ranks = {16, 32, 64};
  return {nvlink, ib};
}

double link_number(const std::string& key, const std::string& value, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v) || v < 0)
    throw Error("--link '" + text + "': " + key + " must be a number >= 0, got '" + value + "'");
  return v;
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t from = 0;
  for (;;) {
    const size_t at = s.find(sep, from);
    out.push_back(s.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) return out;
    from = at + 1;
  }
}

}  // namespace

const std::vector<Link>& link_presets() {
  static const std::vector<Link> presets = make_presets();
  return presets;
}

Link parse_link(const std::string& text) {
  std::vector<std::string> parts = split_on(text, ',');
  Link link;
  size_t first = 0;
  bool preset = false;
  if (!parts[0].empty() && parts[0].find('=') == std::string::npos) {
    first = 1;
    if (parts[0] == "measured") {
      if (parts.size() > 1)
        throw Error("--link '" + text + "': measured takes no settings (the bench times them)");
      link.name = "measured";
      return link;
    }
    for (const Link& p : link_presets())
      if (p.name == parts[0]) link = p, preset = true;
    if (!preset)
      throw Error("--link '" + text + "': no preset named '" + parts[0] +
                  "' (nvlink, infiniband, measured, or key=value pairs: bus=GBPS,step_us=US)");
  }
  bool bus = preset, step = preset;
  for (size_t i = first; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("--link '" + text + "': '" + parts[i] + "' is not key=value");
    const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    if (key == "name") {
      if (value.empty()) throw Error("--link '" + text + "': an empty name");
      link.name = value;
    } else if (key == "bus") {
      link.bus_bandwidth = link_number(key, value, text) * kGigabyte, bus = true;
      if (!preset || link.ranks_per_node == 0) link.net_bus_bandwidth = link.bus_bandwidth;
    } else if (key == "net_bus") {
      link.net_bus_bandwidth = link_number(key, value, text) * kGigabyte;
    } else if (key == "base_us") {
      link.base_latency = link_number(key, value, text) * kMicrosecond;
    } else if (key == "step_us") {
      link.step_latency = link_number(key, value, text) * kMicrosecond, step = true;
      if (!preset) link.net_step_latency = link.step_latency;
    } else if (key == "net_step_us") {
      link.net_step_latency = link_number(key, value, text) * kMicrosecond;
    } else if (key == "per_node" || key == "ranks") {
      std::vector<int> ns;
      for (const std::string& n : split_on(value, '/')) {
        const double v = link_number(key, n, text);
        if (v < 1 || v != std::floor(v) || v > 1e6)
          throw Error("--link '" + text + "': " + key + " takes whole numbers >= 1, got '" + n +
                      "'");
        ns.push_back(static_cast<int>(v));
      }
      if (key == "ranks") link.ranks = ns;
      if (key == "per_node" && ns.size() != 1)
        throw Error("--link '" + text + "': per_node takes one number");
      if (key == "per_node") link.ranks_per_node = ns[0];
    } else {
      throw Error("--link '" + text + "': unknown key '" + key +
                  "' (name, bus, net_bus, base_us, step_us, net_step_us, per_node, ranks)");
    }
  }
  if (!bus || !step)
    throw Error("--link '" + text + "': a link that is not a preset needs bus=GBPS and step_us=US");
  if (link.bus_bandwidth <= 0 || link.net_bus_bandwidth <= 0)
    throw Error("--link '" + text + "': the bus bandwidth must be above 0");
  if (link.name.empty()) link.name = "custom";
  if (link.ranks.empty()) link.ranks = {2, 4, 8};
  if (!preset)
    link.what = format("%.3g GB/s bus bandwidth, %.3g us + %.3g us a ring step (--link)",
                       link.bus_bandwidth / kGigabyte, link.base_latency / kMicrosecond,
                       link.step_latency / kMicrosecond);
  else if (first < parts.size())
    link.what += " (changed by --link " + text + ")";
  return link;
}

int ring_steps(Collective c, int ranks) {
  if (ranks <= 1) return 0;
  switch (c) {
    case Collective::kAllReduce:
      return 2 * (ranks - 1);
    case Collective::kReduceScatter:
      return ranks - 1;
    case Collective::kBroadcast:
      return 1;
  }
  return 0;
}

double bus_factor(Collective c, int ranks) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  switch (c) {
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
    case Collective::kReduceScatter:
      return (n - 1) / n;
    case Collective::kBroadcast:
      return 1;
  }
  return 0;
}

int nodes_for(const Link& link, int ranks) {
  if (link.ranks_per_node <= 0) return 1;
  return (ranks + link.ranks_per_node - 1) / link.ranks_per_node;
}

double latency_seconds(Collective c, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  const int nodes = nodes_for(link, ranks);
  const int steps = ring_steps(c, ranks);
  // NCCL's steps between nodes: 2 per node for an all-reduce, one fewer than the nodes for a
  // reduce-scatter; a broadcast's one step is the network's when it spans nodes.
  int inter = 0;
  if (nodes > 1)
    inter = c == Collective::kAllReduce       ? 2 * nodes
            : c == Collective::kReduceScatter ? nodes - 1
                                              : 1;
  inter = std::min(inter, steps);
  double lat =
      link.base_latency + (steps - inter) * link.step_latency + inter * link.net_step_latency;
  if (nodes > 1 && c == Collective::kAllReduce) lat *= kNetAllReducePlateau;
  return lat;
}

double collective_seconds(Collective c, double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  const double bw = nodes_for(link, ranks) > 1 ? link.net_bus_bandwidth : link.bus_bandwidth;
  return latency_seconds(c, ranks, link) + bus_factor(c, ranks) * bytes / bw;
}

Link fit_link(Collective c, int ranks, const std::vector<std::pair<double, double>>& samples,
              const std::string& what) {
  if (ranks < 2) throw Error("fit_link: a link is measured on 2 or more ranks (internal error)");
  // t = a + k x, x = f(N) bytes, k = 1 / B; weights 1/t^2: the relative error.
  double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
  double lo = 0, hi = 0;
  for (const auto& [bytes, t] : samples) {
    if (!(t > 0)) continue;
    const double x = bus_factor(c, ranks) * bytes, w = 1 / (t * t);
    sw += w, swx += w * x, swxx += w * x * x, swt += w * t, swxt += w * x * t;
    lo = lo == 0 ? x : std::min(lo, x), hi = std::max(hi, x);
  }
  const double det = sw * swxx - swx * swx;
  if (samples.size() < 2 || hi <= lo || det <= 0)
    throw Error("fit_link: the collective was timed at fewer than 2 sizes (internal error)");
  double k = (sw * swxt - swx * swt) / det;
  double a = (swt - k * swx) / sw;
  if (a < 0) a = 0, k = swxt / swxx;  // through the origin
  if (!(k > 0))
    throw Error(
        format("the measured collectives do not take longer with more bytes (%.3g to %.3g bytes); "
               "the host is too busy to time them",
               lo, hi));
  Link link;
  link.name = "measured";
  link.what = what;
  link.bus_bandwidth = link.net_bus_bandwidth = 1 / k;
  link.step_latency = link.net_step_latency = a / ring_steps(c, ranks);
  link.ranks = {ranks};
  return link;
}

double exposed_after(const std::vector<double>& launch, const std::vector<double>& durations,
                     double backward_end) {
  double end = 0;
  for (size_t b = 0; b < durations.size() && b < launch.size(); ++b)
    end = std::max(launch[b], end) + durations[b];
  return std::max(0.0, end - backward_end);
}

Forecast forecast(const ScalingInput& in, const std::vector<Link>& links) {
  Forecast f;
  f.one_rank_step = std::max(0.0, in.step - in.comm);
  f.overlap = in.buckets.empty() ? Overlap::kNone
              : in.on_cuda       ? Overlap::kRange
                                 : Overlap::kMeasured;
  // Without a timeline, the gradients go as one collective when backward ends.
  std::vector<double> bytes, launch;
  for (const BucketTiming& b : in.buckets) {
    bytes.push_back(static_cast<double>(b.bytes));
    launch.push_back(f.overlap == Overlap::kMeasured ? b.launched : in.backward_end);
  }
  if (bytes.empty()) bytes = {static_cast<double>(in.gradient_bytes)}, launch = {0.0};
  const double backward_end = in.buckets.empty() ? 0.0 : in.backward_end;
  for (const Link& link : links) {
    for (int n : link.ranks) {
      ForecastRow r;
      r.link = link.name;
      r.ranks = n;
      r.nodes = nodes_for(link, n);
      std::vector<double> t;
      for (double s : bytes) t.push_back(collective_seconds(in.gradients, s, n, link));
      double sum = 0;
      for (double x : t) sum += x;
      r.exposed = exposed_after(launch, t, backward_end);
      // The ideal overlap: every bucket but the last hidden behind backward.
      r.exposed_low = f.overlap == Overlap::kRange ? t.back() : r.exposed;
      double extra = collective_seconds(Collective::kAllReduce, kAgreementBytes, n, link);
      if (in.broadcast_bytes > 0 && n > 1)
        extra += n * collective_seconds(Collective::kBroadcast,
                                        static_cast<double>(in.broadcast_bytes) / n, n, link);
      r.collectives = sum + extra;
      r.exposed += extra, r.exposed_low += extra;
      r.step = f.one_rank_step + r.exposed;
      r.step_low = f.one_rank_step + r.exposed_low;
      r.efficiency = r.step > 0 ? f.one_rank_step / r.step : 0;
      r.efficiency_high = r.step_low > 0 ? f.one_rank_step / r.step_low : 0;
      f.rows.push_back(r);
    }
  }
  return f;
}

void TimelineMean::add(const std::vector<BucketTiming>& buckets, double backward_end) {
  if (buckets.empty()) return;
  bool same = buckets.size() == sum_.size();
  for (size_t b = 0; same && b < buckets.size(); ++b) same = buckets[b].bytes == sum_[b].bytes;
  if (!same) {
    sum_.assign(buckets.size(), BucketTiming{});
    for (size_t b = 0; b < buckets.size(); ++b)
      sum_[b].bucket = buckets[b].bucket, sum_[b].bytes = buckets[b].bytes;
    backward_end_ = 0, steps_ = 0;
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    sum_[b].ready += buckets[b].ready;
    sum_[b].launched += buckets[b].launched;
    sum_[b].done += buckets[b].done;
  }
  backward_end_ += backward_end;
  ++steps_;
}

std::vector<BucketTiming> TimelineMean::buckets() const {
  std::vector<BucketTiming> out = sum_;
  if (steps_ == 0) return {};
  for (BucketTiming& b : out) {
    b.ready /= static_cast<double>(steps_);
    b.launched /= static_cast<double>(steps_);
    b.done /= static_cast<double>(steps_);
  }
  return out;
}

}  // namespace dtrain::detail
