// The scaling forecast as text (telemetry/forecast.h): the report's and `dtrain bench
// --forecast`'s table, the links' numbers and the assumptions.
#include <algorithm>
#include <map>

#include "telemetry/forecast.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

std::string ms_text(double s) { return format(s < 0.01 ? "%.3f" : "%.2f", 1e3 * s); }

std::string ms_range(double lo, double hi) {
  if (hi - lo < 5e-6) return ms_text(hi);
  return ms_text(lo) + "-" + ms_text(hi);
}

std::string pct_range(double lo, double hi) {
  const std::string a = format("%.0f", 100 * lo), b = format("%.0f", 100 * hi);
  return (a == b ? b : a + "-" + b) + "%";
}

std::string mib_text(double bytes) { return format("%.1f MiB", bytes / (1 << 20)); }

std::string pad_to(const std::string& s, size_t width, bool right = true) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

const char* collective_name(Collective c) {
  return c == Collective::kReduceScatter ? "reduce-scattered" : "all-reduced";
}

std::string overlap_text(const ScalingInput& in, Overlap o) {
  switch (o) {
    case Overlap::kMeasured:
      return "overlap with backward: as in the bucket timeline";
    case Overlap::kRange:
      return "overlap with backward: a range, from none (every bucket after backward: the "
             "slower figure) to ideal (only the last bucket after it): on CUDA the host clock "
             "says when work was queued, not when the GPU ran it";
    case Overlap::kNone:
      return "overlap with backward: none assumed, as no bucket timeline was measured (" +
             std::string(in.world == 1 ? "one rank without dist.reduce_single_rank"
                                       : "the steps ran as a CUDA graph") +
             "): the gradients as one collective after backward, the step's upper bound; "
             "`dtrain bench CONFIG --forecast` times the buckets";
  }
  return "";
}

}  // namespace

std::vector<std::string> forecast_text(const ScalingInput& in, const Forecast& f,
                                       const std::vector<Link>& links, const std::string& source) {
  std::vector<std::string> out;
  double bytes = 0;
  for (const BucketTiming& b : in.buckets) bytes += static_cast<double>(b.bytes);
  if (in.buckets.empty()) bytes = static_cast<double>(in.gradient_bytes);
  out.push_back(
      "scaling forecast (a forecast from measured numbers, not a measurement; "
      "weak scaling: every rank keeps its batch" +
      (in.batch > 0 ? " of " + std::to_string(in.batch) : std::string()) + "):");
  out.push_back("  from " + source);
  std::string from = format("  measured on %d rank(s): step %s ms, of it %s ms communication; ",
                            in.world, ms_text(in.step).c_str(), ms_text(in.comm).c_str());
  from += in.buckets.empty()
              ? "gradients " + mib_text(bytes)
              : std::to_string(in.buckets.size()) + " gradient bucket(s), " + mib_text(bytes);
  from += std::string(", ") + collective_name(in.gradients);
  if (in.broadcast_bytes > 0)
    from += ", the updated parameters (" + mib_text(static_cast<double>(in.broadcast_bytes)) +
            ") broadcast by their shards' owners";
  out.push_back(from);
  out.push_back("  " + overlap_text(in, f.overlap));
  const bool range = f.overlap == Overlap::kRange;
  out.push_back("  " + pad_to("link", 12, false) + pad_to("GPUs", 5) + pad_to("nodes", 7) +
                pad_to("collectives ms", 16) + pad_to("exposed ms", 16) + pad_to("step ms", 16) +
                pad_to("efficiency", 12));
  for (const ForecastRow& r : f.rows)
    out.push_back("  " + pad_to(r.link, 12, false) + pad_to(std::to_string(r.ranks), 5) +
                  pad_to(std::to_string(r.nodes), 7) + pad_to(ms_text(r.collectives), 16) +
                  pad_to(ms_range(r.exposed_low, r.exposed), 16) +
                  pad_to(ms_range(r.step_low, r.step), 16) +
                  pad_to(pct_range(r.efficiency, r.efficiency_high), 12));
  out.push_back("  efficiency: the step without communication (" + ms_text(f.one_rank_step) +
                " ms, one rank's) over the forecast step" +
                (range ? "; a range where the overlap is not measured" : ""));
  std::map<std::string, bool> said;
  for (const Link& l : links) {
    if (said[l.name]) continue;
    said[l.name] = true;
    out.push_back("  " + l.name + ": " + l.what);
  }
  out.push_back(
      "  assumes: every rank computes as this one did (no straggler, no contention for a host's "
      "cores or memory) and its loader keeps up as here; the link reaches its bus bandwidth at "
      "every bucket size; NCCL's ring algorithm (its tree and NVLS can be faster); the "
      "collectives one at a time in bucket order; one small agreement a step; SyncBatchNorm's "
      "collectives not counted (Note [scaling forecast], src/telemetry/forecast.h)");
  return out;
}

std::string forecast_line(const Forecast& f) {
  // The largest world of each link, in the links' order.
  std::vector<const ForecastRow*> last;
  for (const ForecastRow& r : f.rows) {
    if (!last.empty() && last.back()->link == r.link) {
      if (r.ranks > last.back()->ranks) last.back() = &r;
      continue;
    }
    last.push_back(&r);
  }
  std::string s = "scaling forecast (report.txt has the table and its assumptions):";
  for (size_t i = 0; i < last.size(); ++i) {
    const ForecastRow& r = *last[i];
    s += (i ? "; " : " ") + std::to_string(r.ranks) + " GPUs over " + r.link + " " +
         pct_range(r.efficiency, r.efficiency_high) + " efficiency (step " +
         ms_range(r.step_low, r.step) + " ms)";
  }
  return s;
}

}  // namespace dtrain::detail
