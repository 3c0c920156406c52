#include "bench/scaling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "cuda/graph.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "util/clock.h"
#include "util/format.h"

namespace dtrain::bench {

using detail::Collective;
using detail::Link;

std::vector<Link> forecast_links(const std::vector<std::string>& texts, int world) {
  std::vector<Link> links;
  for (const std::string& t : texts) {
    Link l = detail::parse_link(t);
    if (l.name == "measured" && world < 2)
      throw Error(
          "--link measured: the collective is timed on this job's ranks, and it has one "
          "(run the bench under mpirun -np N, N >= 2)");
    links.push_back(l);
  }
  if (!texts.empty()) return links;
  if (world > 1) links.push_back(detail::parse_link("measured"));
  for (const Link& l : detail::link_presets()) links.push_back(l);
  return links;
}

std::vector<std::pair<double, double>> time_collective(Runtime& rt, Collective c,
                                                       const std::vector<int64_t>& bytes,
                                                       at::ScalarType dtype, int repeats) {
  Communicator& comm = rt.comm();
  Communicator& control = rt.cpu_comm();
  const at::Device device = rt.device();
  const int64_t es = static_cast<int64_t>(c10::elementSize(dtype));
  std::vector<double> medians;
  for (int64_t b : bytes) {
    const int64_t n = std::max<int64_t>(comm.world(), b / es);
    at::Tensor t = at::ones({n}, at::TensorOptions().dtype(dtype).device(device));
    std::vector<int64_t> counts(static_cast<size_t>(comm.world()), n / comm.world());
    counts.back() += n - (n / comm.world()) * comm.world();
    at::Tensor out = at::empty({counts[static_cast<size_t>(comm.rank())]}, t.options());
    std::vector<double> seconds;
    for (int k = 0; k <= repeats; ++k) {
      control.barrier();
      detail::synchronize(device);
      const auto t0 = detail::Clock::now();
      std::unique_ptr<Work> w = c == Collective::kReduceScatter
                                    ? comm.reduce_scatter_async(t, counts, out, ReduceOp::kAvg)
                                    : comm.all_reduce_async(t, ReduceOp::kAvg);
      w->wait();
      detail::synchronize(device);
      if (k > 0) seconds.push_back(detail::seconds_since(t0));  // the first is not timed
    }
    std::sort(seconds.begin(), seconds.end());
    medians.push_back(seconds[seconds.size() / 2]);
  }
  // The slowest rank's: a collective ends for the step when it ends everywhere.
  at::Tensor m = at::tensor(medians, at::kDouble);
  control.all_reduce(m, ReduceOp::kMax);
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < bytes.size(); ++i)
    out.emplace_back(static_cast<double>(bytes[i]), m[static_cast<int64_t>(i)].item<double>());
  return out;
}

namespace {

// The sizes to time: a small one (the latency), the buckets' own (at most 6, spread over them)
// and one between the small one and the largest bucket.
std::vector<int64_t> timed_sizes(const ScalingForecast& f) {
  std::set<int64_t> distinct;
  for (const BucketTiming& b : f.input.buckets) distinct.insert(b.bytes);
  if (distinct.empty()) distinct.insert(std::max<int64_t>(f.input.gradient_bytes, 1 << 20));
  const std::vector<int64_t> all(distinct.begin(), distinct.end());
  std::set<int64_t> sizes = {4096};
  const size_t keep = std::min<size_t>(6, all.size());
  for (size_t i = 0; i < keep; ++i)
    sizes.insert(all[keep == 1 ? all.size() - 1 : i * (all.size() - 1) / (keep - 1)]);
  sizes.insert(static_cast<int64_t>(std::sqrt(4096.0 * static_cast<double>(all.back()))));
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

}  // namespace

ScalingForecast forecast_setting(Runtime& rt, const Row& row, const Config& config,
                                 std::vector<Link> links, const std::string& source) {
  ScalingForecast f;
  detail::ScalingInput& in = f.input;
  in.world = rt.world();
  in.step = row.step_mean_s;
  in.comm = row.comm_per_step_s;
  in.batch = row.global_batch / std::max(1, rt.world());
  in.buckets = row.buckets;
  in.backward_end = row.backward_end;
  in.on_cuda = rt.device().is_cuda();
  const bool sharded = config.dist.shard_optimizer != ShardOptimizer::kOff;
  const bool bf16 = config.dist.grad_dtype == GradDtype::kBf16;
  in.gradients = sharded ? Collective::kReduceScatter : Collective::kAllReduce;
  in.gradient_bytes = bf16 ? row.gradient_bytes / 2 : row.gradient_bytes;
  if (sharded) in.broadcast_bytes = row.weight_bytes;
  f.source = source;
  for (Link& l : links) {
    if (l.name != "measured") continue;
    const std::vector<int64_t> sizes = timed_sizes(f);
    f.timed = time_collective(rt, in.gradients, sizes, bf16 ? at::kBFloat16 : at::kFloat);
    const std::string what =
        in.gradients == Collective::kReduceScatter ? "reduce-scatter" : "all-reduce";
    l = detail::fit_link(in.gradients, in.world, f.timed, "");
    l.what = detail::format(
        "this job's %s %s on %d ranks, timed at %zu sizes from %s to %s bytes: %.3g GB/s bus "
        "bandwidth, %.3g us latency (fitted)",
        rt.comm().backend().c_str(), what.c_str(), in.world, sizes.size(),
        std::to_string(sizes.front()).c_str(), std::to_string(sizes.back()).c_str(),
        l.bus_bandwidth / 1e9, 1e6 * detail::latency_seconds(in.gradients, in.world, l));
  }
  f.links = links;
  f.forecast = detail::forecast(in, f.links);
  return f;
}

std::string forecast_json(const ScalingForecast& f) {
  using nlohmann::json;
  const detail::ScalingInput& in = f.input;
  json buckets = json::array();
  for (const BucketTiming& b : in.buckets)
    buckets.push_back(
        {{"bytes", b.bytes}, {"ready_s", b.ready}, {"launched_s", b.launched}, {"done_s", b.done}});
  const char* overlap = f.forecast.overlap == detail::Overlap::kMeasured ? "measured"
                        : f.forecast.overlap == detail::Overlap::kRange  ? "range"
                                                                         : "none";
  json from = {
      {"source", f.source},
      {"world", in.world},
      {"step_s", in.step},
      {"comm_s", in.comm},
      {"rank_batch", in.batch},
      {"buckets", buckets},
      {"backward_end_s", in.backward_end},
      {"on_cuda", in.on_cuda},
      {"collective", in.gradients == Collective::kReduceScatter ? "reduce_scatter" : "all_reduce"},
      {"gradient_bytes", in.gradient_bytes},
      {"broadcast_bytes", in.broadcast_bytes}};
  json links = json::array();
  for (const Link& l : f.links)
    links.push_back({{"name", l.name},
                     {"what", l.what},
                     {"bus_gbps", l.bus_bandwidth / 1e9},
                     {"net_bus_gbps", l.net_bus_bandwidth / 1e9},
                     {"base_us", l.base_latency * 1e6},
                     {"step_us", l.step_latency * 1e6},
                     {"net_step_us", l.net_step_latency * 1e6},
                     {"per_node", l.ranks_per_node},
                     {"ranks", l.ranks}});
  json timed = json::array();
  for (const auto& [bytes, seconds] : f.timed) timed.push_back({{"bytes", bytes}, {"s", seconds}});
  json rows = json::array();
  for (const detail::ForecastRow& r : f.forecast.rows)
    rows.push_back({{"link", r.link},
                    {"ranks", r.ranks},
                    {"nodes", r.nodes},
                    {"collectives_s", r.collectives},
                    {"exposed_s", r.exposed},
                    {"exposed_low_s", r.exposed_low},
                    {"step_s", r.step},
                    {"step_low_s", r.step_low},
                    {"efficiency", r.efficiency},
                    {"efficiency_high", r.efficiency_high}});
  json j = {
      {"note", "a forecast from the timed steps, not a measurement (Note [scaling forecast])"},
      {"from", from},
      {"overlap", overlap},
      {"one_rank_step_s", f.forecast.one_rank_step},
      {"links", links},
      {"measured_collective", timed},
      {"rows", rows}};
  return j.dump();
}

std::pair<detail::ScalingInput, std::string> scaling_input_from_json(const std::string& text,
                                                                     const std::string& origin) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error("not a JSON object", origin);
  if (j.contains("forecast")) j = j["forecast"];
  if (j.contains("from")) j = j["from"];
  auto field = [&](const json& o, const char* key, bool required) -> const json* {
    if (!o.contains(key)) {
      if (required) throw Error(std::string("no \"") + key + "\" in the measurements", origin);
      return nullptr;
    }
    return &o.at(key);
  };
  auto number = [&](const json& o, const char* key, bool required, double fallback) {
    const json* v = field(o, key, required);
    if (!v) return fallback;
    if (!v->is_number() || !(v->get<double>() >= 0))
      throw Error(std::string("\"") + key + "\" must be a number >= 0", origin);
    return v->get<double>();
  };
  detail::ScalingInput in;
  in.world = static_cast<int>(number(j, "world", false, 1));
  in.step = number(j, "step_s", true, 0);
  in.comm = number(j, "comm_s", false, 0);
  if (in.comm > in.step) throw Error("\"comm_s\" is more than \"step_s\"", origin);
  in.batch = static_cast<int64_t>(number(j, "rank_batch", false, 0));
  in.backward_end = number(j, "backward_end_s", false, 0);
  in.gradient_bytes = static_cast<int64_t>(number(j, "gradient_bytes", false, 0));
  in.broadcast_bytes = static_cast<int64_t>(number(j, "broadcast_bytes", false, 0));
  if (const json* c = field(j, "on_cuda", false)) {
    if (!c->is_boolean()) throw Error("\"on_cuda\" must be true or false", origin);
    in.on_cuda = c->get<bool>();
  }
  if (const json* c = field(j, "collective", false)) {
    if (*c != "all_reduce" && *c != "reduce_scatter")
      throw Error("\"collective\" must be \"all_reduce\" or \"reduce_scatter\"", origin);
    if (*c == "reduce_scatter") in.gradients = Collective::kReduceScatter;
  }
  if (const json* b = field(j, "buckets", false)) {
    if (!b->is_array()) throw Error("\"buckets\" must be a list", origin);
    for (const json& x : *b) {
      if (!x.is_object()) throw Error("each of \"buckets\" must be an object", origin);
      BucketTiming t;
      t.bucket = static_cast<int>(in.buckets.size());
      t.bytes = static_cast<int64_t>(number(x, "bytes", true, 0));
      t.launched = number(x, "launched_s", false, in.backward_end);
      t.ready = number(x, "ready_s", false, t.launched);
      t.done = number(x, "done_s", false, t.launched);
      in.buckets.push_back(t);
    }
  }
  if (in.buckets.empty() && in.gradient_bytes <= 0)
    throw Error("neither \"buckets\" nor \"gradient_bytes\": nothing to send", origin);
  std::string source = origin;
  if (const json* s = field(j, "source", false); s && s->is_string())
    source = s->get<std::string>();
  return {in, source};
}

}  // namespace dtrain::bench
