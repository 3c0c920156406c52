#include "telemetry/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "util/format.h"

namespace dtrain::detail {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

std::string pct(double share) { return format("%.0f%%", 100 * share); }
// One decimal, or three under a second (short runs).
std::string secs(double s) { return format(s < 1 ? "%.3f" : "%.1f", s); }
std::string ms(double s) { return format(s < 1e-3 ? "%.2f ms" : "%.1f ms", 1e3 * s); }
std::string mib(int64_t bytes) {
  const double m = static_cast<double>(bytes) / kMiB;
  return m < 0.1 ? format("%.0f KiB", m * 1024) : format("%.1f MiB", m);
}
std::string num(int64_t v) { return std::to_string(v); }
std::string mb(double v) { return format("%g", v); }

double busy(const PhaseTimes& p) { return p.data + p.compute + p.optimizer; }

// A larger per-rank batch is a change of the training recipe, not only of its speed: said with it.
std::string larger_batch(const std::string& why) {
  return "a larger per-rank batch (train.global_batch) " + why +
         ", but it changes the training recipe: scale train.lr with it (the linear scaling rule) "
         "and compare the loss curves";
}

std::string rank_name(const DiagnosisInput& in, size_t r) {
  std::string s = "rank " + std::to_string(r);
  if (r < in.rank_hosts.size() && !in.rank_hosts[r].empty()) s += " on " + in.rank_hosts[r];
  return s;
}

// How much longer the slowest rank was busy than the fastest (0.17: 17%); 0 with fewer than 2
// ranks known. Sets the slowest and fastest rank.
double rank_spread(const DiagnosisInput& in, size_t& slow, size_t& fast) {
  if (in.rank_phases.size() < 2) return 0;
  slow = fast = 0;
  for (size_t r = 1; r < in.rank_phases.size(); ++r) {
    if (busy(in.rank_phases[r]) > busy(in.rank_phases[slow])) slow = r;
    if (busy(in.rank_phases[r]) < busy(in.rank_phases[fast])) fast = r;
  }
  const double lo = busy(in.rank_phases[fast]);
  return lo > 0 ? busy(in.rank_phases[slow]) / lo - 1 : 0;
}

enum class Level { kBelow, kClose, kAbove };
// A share against its threshold, with the band of Note in diagnosis.h.
Level level(double share, double threshold) {
  if (share > kNearHigh * threshold) return Level::kAbove;
  return share >= kNearLow * threshold ? Level::kClose : Level::kBelow;
}

void data_bound(const DiagnosisInput& in, double share, std::vector<Finding>& out) {
  Finding f{"data-bound",
            pct(share) + " of step time waiting for data (" + secs(in.phases.data) + " of " +
                secs(in.phases.total()) + " s on rank 0)",
            ""};
  const std::string prefetch = "data.prefetch is " + num(in.prefetch);
  if (in.workers == 0)
    f.fix = "set data.workers (now 0: batches are loaded on the training thread) to 2 or more; " +
            prefetch;
  else if (in.workers < 8)
    f.fix = "raise data.workers from " + num(in.workers) + " (e.g. to " + num(2 * in.workers) +
            "); " + prefetch +
            (in.prefetch < 2 * in.workers ? " (keep it at least twice the workers)" : "");
  else
    f.fix = "data.workers is already " + num(in.workers) +
            ": each batch costs the loader too much; raise data.prefetch from " + num(in.prefetch) +
            (in.on_cuda && !in.pin_memory ? ", set data.pin_memory=true (now false)" : "") +
            " and make the dataset's get() cheaper (decode or augment ahead of time)";
  // More CPUs per rank only where each has one (a launcher that binds to a core each) and half of
  // the host idles: a rank of several CPUs was bound so on purpose (mpirun-local.sh's share).
  if (in.idle_cpus > 0 && in.workers > 0 && in.rank_cpus == 1) {
    f.what += "; each rank may use " + num(in.rank_cpus) +
              " CPU(s) (the launcher's binding) for its " + num(in.workers) +
              " loader thread(s) and its training thread, while " + num(in.idle_cpus) +
              " CPUs of the host stay idle";
    f.fix = "give each rank more CPUs: " + in.binding_fix + "; or " + f.fix;
  }
  out.push_back(f);
}

// The step's collective time, when the gradient buckets explain little of it (the last step's
// exposed waits under kExposedShare of the mean collective time per step): the ranks wait for
// each other, not for the wire.
bool waiting_for_ranks(const DiagnosisInput& in, double share, bool ranks_apart,
                       std::vector<Finding>& out) {
  if (in.buckets.empty() || in.steps <= 0) return false;
  double exposed = 0;
  for (size_t i = 0; i < in.buckets.size(); ++i)
    exposed += exposed_wait(in.buckets, i, in.backward_end);
  const double per_step = in.phases.comm / static_cast<double>(in.steps);
  if (exposed >= kExposedShare * per_step) return false;
  const std::string bind =
      !in.on_cuda && in.sharing_ranks > 1
          ? "on CPUs, give each rank cores of its own (launch/mpirun-local.sh binds them; rank 0 "
            "shares its CPUs with " +
                num(in.sharing_ranks - 1) + " other rank(s)); "
          : "";
  Finding f{"communication-bound",
            pct(share) + " of step time in the step's collectives (" + secs(in.phases.comm) +
                " of " + secs(in.phases.total()) +
                " s on rank 0), but not for the gradients: the last step's " +
                std::to_string(in.buckets.size()) + " bucket(s) waited " + ms(exposed) +
                " after backward, against " + ms(per_step) +
                " of collective time per step; the rest is the ranks waiting for each other",
            ranks_apart ? "the slowest rank (below) sets the pace"
                        : bind + larger_batch("makes each step's synchronization a smaller share")};
  out.push_back(f);
  return true;
}

// What the gradient engine's collectives are: with dist.shard_optimizer (the state shared by
// several ranks) the buckets are reduce-scattered, else all-reduced.
std::string collective(const DiagnosisInput& in) {
  return in.optimizer_shards > 1 ? "reduce-scatter" : "all-reduce";
}

void comm_bound(const DiagnosisInput& in, double share, bool ranks_apart,
                std::vector<Finding>& out) {
  if (waiting_for_ranks(in, share, ranks_apart, out)) return;
  Finding f{"communication-bound",
            pct(share) + " of step time waiting for gradient " + collective(in) +
                "s after backward (" + secs(in.phases.comm) + " of " + secs(in.phases.total()) +
                " s on rank 0)",
            ""};
  const auto& b = in.buckets;
  std::vector<size_t> order(b.size());
  for (size_t i = 0; i < b.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return exposed_wait(b, x, in.backward_end) > exposed_wait(b, y, in.backward_end);
  });
  double exposed = 0;
  int64_t exposed_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double e = exposed_wait(b, i, in.backward_end);
    exposed += e;
    total_bytes += b[i].bytes;
    if (e > 0) exposed_bytes += b[i].bytes;
  }
  // Latency, not bandwidth: every bucket that waited is small enough that a collective's fixed
  // cost, not its bytes, sets its time; fewer bytes on the wire would not shorten it.
  bool latency = !b.empty();
  for (size_t i = 0; i < b.size(); ++i)
    if (exposed_wait(b, i, in.backward_end) > 0 && b[i].bytes >= kLatencyBoundBytes)
      latency = false;
  if (!b.empty()) {
    f.what += "; the last step's backward ended at " + ms(in.backward_end) + " and " +
              std::to_string(b.size()) + " bucket(s) waited " + ms(exposed) + " after it";
    int listed = 0;
    for (size_t i : order) {
      const double e = exposed_wait(b, i, in.backward_end);
      if (e <= 0 || listed == 3) break;
      f.what += std::string(listed++ ? ";" : ":") + " bucket " + std::to_string(b[i].bucket) +
                " (" + mib(b[i].bytes) + ") ready " + ms(b[i].ready) + ", launched " +
                ms(b[i].launched) + ", done " + ms(b[i].done) + ": " + ms(e) + " exposed";
    }
  }
  if (latency)
    f.what += "; the buckets are small (" + mib(total_bytes) + " in all" +
              (exposed_bytes > 0 ? ", " + mib(exposed_bytes) + " of them exposed" : std::string()) +
              "): the wait is each " + collective(in) +
              "'s fixed cost and the ranks' skew, not bytes on the wire";
  if (ranks_apart) f.what += "; part of this wait is for the slowest rank (below)";
  // Ranks on several hosts: every collective crosses the network between them, the slowest link
  // of the ring, which sets the bytes' time when it is slower than the links within a host.
  const std::set<std::string> hosts(in.rank_hosts.begin(), in.rank_hosts.end());
  const bool across_hosts = hosts.size() > 1 && !latency;
  if (across_hosts)
    f.what += "; the " + std::to_string(in.world) + " ranks are on " +
              std::to_string(hosts.size()) + " hosts: every " + collective(in) +
              " crosses the network between them, whose bandwidth sets this wait when it is "
              "below the links within a host";
  std::vector<std::string> fixes;
  if (!in.overlap)
    fixes.push_back(
        "set dist.overlap=true (now false: every bucket waits for the end of backward)");
  if (!b.empty() && in.overlap) {
    const BucketTiming& worst = b[order.front()];
    const double mean_mib = static_cast<double>(total_bytes) / kMiB / static_cast<double>(b.size());
    if (b.size() > 16 && mean_mib < 1)
      fixes.push_back("raise dist.bucket_cap_mb from " + mb(in.bucket_cap_mb) + " (" +
                      std::to_string(b.size()) + " buckets of " + format("%.2f", mean_mib) +
                      " MiB on average: each " + collective(in) + " has a fixed cost)");
    else if (worst.launched >= in.backward_end * 0.99 && b.size() > 0)
      fixes.push_back("lower dist.bucket_cap_mb from " + mb(in.bucket_cap_mb) +
                      " so that less waits for "
                      "the end of backward (bucket " +
                      std::to_string(worst.bucket) + " was launched as backward ended)");
  }
  if (in.grad_dtype != "bf16" && !latency)
    fixes.push_back("set dist.grad_dtype=bf16 (halves the bytes on the wire)");
  if (latency)
    fixes.push_back("fewer ranks: a model whose gradients are this small gains little from more");
  if (across_hosts)
    fixes.push_back(
        "a faster network between the hosts (InfiniBand or RoCE for NCCL; check the link "
        "each host uses with dtrain env), or fewer hosts for the same ranks");
  fixes.push_back(larger_batch("gives backward more to hide it behind"));
  for (size_t i = 0; i < fixes.size(); ++i) f.fix += (i ? "; " : "") + fixes[i];
  out.push_back(f);
}

void launch_bound(const DiagnosisInput& in, const std::string& evidence,
                  std::vector<Finding>& out) {
  Finding f{"launch-bound", evidence, ""};
  const bool graphed = in.step_mode.find("CUDA graph: captured") != std::string::npos;
  std::vector<std::string> fixes;
  if (graphed) {
    f.what += "; steps already replay a CUDA graph";
  } else if (in.cuda_graph == "off") {
    fixes.push_back("set train.cuda_graph=auto (now off): one launch per step");
  } else {
    f.what += "; steps ran " + (in.step_mode.empty() ? std::string("eager") : in.step_mode);
    fixes.push_back(
        std::string("train.cuda_graph replays the step as one launch when it can: it needs ") +
        (in.world > 1 ? "gradients over NCCL (dist.backend), " : "") +
        "a fused optimizer (train.fused_optimizer) and no loss scaler (fp16, "
        "train.skip_nonfinite)");
  }
  if (in.micro_batch > 0 && in.micro_batch < in.rank_batch)
    fixes.push_back("a bigger micro-batch: train.micro_batch=0 runs the per-rank batch of " +
                    num(in.rank_batch) + " at once (now " + num(in.micro_batch) + ")");
  else
    fixes.push_back(larger_batch("gives each launch more work (per-rank batch now " +
                                 num(in.rank_batch) + ")"));
  for (size_t i = 0; i < fixes.size(); ++i) f.fix += (i ? "; " : "") + fixes[i];
  out.push_back(f);
}

void memory_headroom(const DiagnosisInput& in, std::vector<Finding>& out) {
  if (in.memory_total <= 0 || in.memory_peak <= 0) return;
  const std::string of = format("%.1f of %.1f GiB", static_cast<double>(in.memory_peak) / kGiB,
                                static_cast<double>(in.memory_total) / kGiB);
  const int64_t grow = micro_batch_growth(in.memory_peak, in.memory_total);
  if (grow >= 2) {
    Finding f{"memory headroom",
              "peak " + of + " on rank 0: micro_batch can grow about " + num(grow) + "x (now " +
                  num(in.micro_batch) + ")",
              ""};
    if (in.micro_batch < in.rank_batch)
      f.fix = "raise train.micro_batch toward " +
              num(std::min(in.rank_batch, in.micro_batch * grow)) +
              " (train.micro_batch=auto measures the largest that fits)";
    else
      f.fix = "the micro-batch is the whole per-rank batch: " +
              larger_batch("would use the room (per-rank batch now " + num(in.rank_batch) + ")") +
              "; or train a bigger model";
    out.push_back(f);
  } else if (static_cast<double>(in.memory_peak) >
             kUsableMemory * static_cast<double>(in.memory_total)) {
    out.push_back({"memory headroom", "peak " + of + " on rank 0: less than 10% of the device left",
                   "train.micro_batch=auto leaves 10% free"});
  }
}

void memory_by_kind(const DiagnosisInput& in, std::vector<Finding>& out) {
  if (in.memory_peak <= 0 || in.weight_bytes <= 0) return;
  const int64_t held = in.weight_bytes + in.gradient_bytes + in.optimizer_state_bytes;
  std::string what = "rank 0's peak of " + gib(in.memory_peak) + ": weights " +
                     gib(in.weight_bytes) + ", gradients " + gib(in.gradient_bytes) +
                     ", optimizer state " + gib(in.optimizer_state_bytes);
  if (in.optimizer_shards > 1) what += " (its shard of " + num(in.optimizer_shards) + ")";
  what += ", activations and workspace " + gib(std::max<int64_t>(0, in.memory_peak - held)) +
          " (the rest: the step's activations, the reducer's buckets, library workspaces)";
  out.push_back({"memory by kind", what, ""});
}

void slowest_rank(const DiagnosisInput& in, size_t slow, size_t fast, std::vector<Finding>& out) {
  const PhaseTimes& s = in.rank_phases[slow];
  const PhaseTimes& q = in.rank_phases[fast];
  const double more = busy(s) / busy(q) - 1;
  // The phase that makes most of the difference.
  const double dd = s.data - q.data, dc = s.compute - q.compute, dopt = s.optimizer - q.optimizer;
  std::string where = "compute";
  if (dd > dc && dd > dopt)
    where = "data wait";
  else if (dopt > dc && dopt > dd)
    where = "optimizer";
  Finding f{"slowest rank",
            rank_name(in, slow) + " spent " + secs(busy(s)) +
                " s in data, compute and optimizer, " + pct(more) + " more than " +
                rank_name(in, fast) + " (" + secs(busy(q)) + " s), most of it in " + where +
                "; the other ranks wait for it in every " + collective(in),
            ""};
  f.fix =
      where == "data wait"
          ? "look at rank " + std::to_string(slow) +
                "'s loader: its CPUs (other processes, binding) "
                "and its storage; data.workers is " +
                num(in.workers)
          : "look at rank " + std::to_string(slow) + "'s host: other processes on its CPUs or GPU" +
                (in.sharing_ranks > 1 ? ", its CPU binding (launch/mpirun-local.sh binds each rank)"
                                      : "") +
                ", a slower or throttled GPU";
  out.push_back(f);
}

}  // namespace

double exposed_wait(const std::vector<BucketTiming>& buckets, size_t b, double backward_end) {
  const double from = std::max(backward_end, b > 0 ? buckets[b - 1].done : 0.0);
  return std::max(0.0, buckets[b].done - from);
}

int64_t micro_batch_growth(int64_t peak, int64_t total) {
  if (peak <= 0 || total <= 0) return 1;
  const double room = kUsableMemory * static_cast<double>(total) / static_cast<double>(peak);
  int64_t n = 1;
  while (static_cast<double>(2 * n) <= room) n *= 2;
  return n;
}

std::vector<Finding> diagnose(const DiagnosisInput& in) {
  std::vector<Finding> out;
  const double total = in.phases.total();
  if (in.steps <= 0 || total <= 0) {
    out.push_back({"no steps", "no training step ran: nothing to diagnose", ""});
    return out;
  }
  const double data = in.phases.data / total, comm = in.phases.comm / total;
  const double compute = in.phases.compute / total, optimizer = in.phases.optimizer / total;
  size_t slow = 0, fast = 0;
  const double spread = rank_spread(in, slow, fast);
  // CPU ranks share a host's memory bandwidth and caches, and its other processes: identical runs
  // spread twice as wide as GPUs'.
  const double spread_threshold = in.on_cuda ? kRankSpread : 2 * kRankSpread;
  const bool apart = level(spread, spread_threshold) == Level::kAbove;
  // Shares close to their thresholds: named beside the verdict, never the verdict.
  std::vector<std::string> close;
  const auto near = [&](double v, double threshold, const std::string& what) {
    if (level(v, threshold) == Level::kClose)
      close.push_back(what + " " + pct(v) + " (" + pct(kNearHigh * threshold) +
                      " makes it a finding)");
  };
  near(data, kDataBoundShare, "data wait");
  if (in.world > 1) near(comm, kCommBoundShare, "communication");
  near(spread, spread_threshold, "the ranks' busy time apart by");
  bool bound = false;
  if (level(data, kDataBoundShare) == Level::kAbove) data_bound(in, data, out), bound = true;
  if (in.world > 1 && level(comm, kCommBoundShare) == Level::kAbove)
    comm_bound(in, comm, apart, out), bound = true;
  if (in.on_cuda && !bound) {
    const bool graphed = in.step_mode.find("CUDA graph: captured") != std::string::npos;
    const int64_t micro = std::max<int64_t>(1, in.micro_batch);
    const double per_micro = in.phases.compute / static_cast<double>(in.steps) /
                             static_cast<double>(std::max<int64_t>(1, in.rank_batch / micro));
    if (in.gpu_busy_percent && *in.gpu_busy_percent < kLowGpuBusyPercent) {
      launch_bound(
          in,
          format("the GPU was busy %.0f%% of the time (NVML) with neither the data nor the "
                 "communication to blame: the host does not launch work fast enough",
                 *in.gpu_busy_percent) +
              " (" + num(in.parameters) + " parameters)",
          out);
      bound = true;
    } else if (!in.gpu_busy_percent && !graphed && in.parameters < kSmallModelParameters &&
               per_micro < kLaunchBoundMicroSeconds) {
      launch_bound(in,
                   "likely: a small model (" + num(in.parameters) +
                       " parameters) whose forward/backward "
                       "takes the host " +
                       ms(per_micro) +
                       " per micro-batch, about what launching its "
                       "kernels costs (no NVML figures to confirm)",
                   out);
      bound = true;
    }
  }
  if (apart) slowest_rank(in, slow, fast, out), bound = true;
  if (!bound) {
    if (optimizer > compute)
      out.push_back({"optimizer-bound",
                     pct(optimizer) + " of step time in the optimizer step (clip + step)",
                     in.on_cuda ? "train.fused_optimizer=true runs it as one kernel" : ""});
    else
      out.push_back({"compute-bound",
                     pct(compute) + " of step time in forward/backward: the " +
                         std::string(in.on_cuda ? "GPU" : "CPU") + " is the limit",
                     ""});
  }
  if (!close.empty()) {
    std::string what;
    for (size_t i = 0; i < close.size(); ++i) what += (i ? ", " : "") + close[i];
    out.push_back({"close",
                   what + ": near the line between limiting the run and not, where the noise "
                          "of identical runs moves it; not the verdict",
                   ""});
  }
  memory_headroom(in, out);
  memory_by_kind(in, out);
  if (in.oom_retries > 0)
    out.push_back({"out of memory",
                   num(in.oom_retries) +
                       " step(s) redone after running out of memory: the micro-batch went from " +
                       num(in.first_micro_batch) + " to " + num(in.micro_batch),
                   "start with train.micro_batch=" + num(in.micro_batch) +
                       " (or auto, which measures) to skip the retries"});
  if (in.skipped_steps > 0) {
    const bool many = in.skipped_steps > 20 &&
                      static_cast<double>(in.skipped_steps) > 0.01 * static_cast<double>(in.steps);
    out.push_back({"skipped steps",
                   num(in.skipped_steps) + " of " + num(in.steps) +
                       " steps skipped for non-finite gradients" +
                       (many ? "" : " (a few while the loss scale settles are normal)"),
                   many ? "train.precision=bf16 needs no loss scaling" : ""});
  }
  return out;
}

std::string diagnosis_text(const std::vector<Finding>& findings) {
  std::string s = "diagnosis:";
  for (const Finding& f : findings) {
    s += "\n  " + f.kind + ": " + f.what;
    if (!f.fix.empty()) s += "\n    fix: " + f.fix;
  }
  return s + "\n";
}

}  // namespace dtrain::detail
