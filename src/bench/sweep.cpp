#include "bench/sweep.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <set>
#include <utility>

#include "bench/step_timer.h"
#include "cuda/device.h"
#include "cuda/memory.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/session.h"
#include "train/recovery.h"
#include "util/format.h"

namespace dtrain::bench {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The keys the command-line overrides set ("train.lr=0.1" -> "train.lr").
std::set<std::string> override_keys(const std::vector<std::string>& overrides) {
  std::set<std::string> keys;
  for (const std::string& o : overrides) keys.insert(trim(o.substr(0, o.find('='))));
  return keys;
}

std::string describe(const Setting& s, int world) {
  const std::string micro = s.micro_batch < 0   ? std::string("auto")
                            : s.micro_batch == 0 ? std::to_string(s.rank_batch)
                                                 : std::to_string(s.micro_batch);
  std::string d = "micro-batch " + micro + " per rank x " + std::to_string(world) +
                  " rank(s), global batch " + std::to_string(s.global_batch);
  if (s.accum_steps > 1) d += " (" + std::to_string(s.accum_steps) + " accumulation steps)";
  d += ", data.workers " + std::to_string(s.workers);
  if (s.checkpointing != ActivationCheckpointing::kOff) d += ", train.activation_checkpointing blocks";
  if (s.shard_optimizer) d += ", dist.shard_optimizer";
  if (s.decode != DecodeMode::kCpu) d += std::string(", data.decode ") + to_string(s.decode);
  return d;
}

}  // namespace

const char* to_string(GlobalBatch rule) {
  switch (rule) {
    case GlobalBatch::kMicroTimesWorld: return "micro_batch x world";
    case GlobalBatch::kFixed: return "fixed (train.global_batch on the command line)";
    case GlobalBatch::kConfig: return "the config's";
  }
  return "?";
}

namespace {

// The comma-separated entries of `text`, trimmed, each once: an Error naming `option` for an empty
// list, an empty entry or one given twice.
std::vector<std::string> entries(const std::string& text, const std::string& option) {
  const std::string in = " (in '" + text + "')";
  if (trim(text).empty()) throw Error("needs a comma-separated list, got '" + text + "'", option);
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    const size_t comma = text.find(',', begin);
    const std::string entry =
        trim(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (entry.empty()) throw Error("an empty entry" + in, option);
    for (const std::string& seen : out)
      if (seen == entry) throw Error(entry + " is given twice" + in, option);
    out.push_back(entry);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<int64_t> parse_sizes(const std::string& text, const std::string& option, int64_t min) {
  std::vector<int64_t> out;
  const std::string in = " (in '" + text + "')";
  for (const std::string& entry : entries(text, option)) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(entry.c_str(), &end, 10);
    if (end == entry.c_str() || *end != '\0')
      throw Error("'" + entry + "' is not a whole number" + in, option);
    if (errno == ERANGE) throw Error("'" + entry + "' is too large" + in, option);
    if (v < min)
      throw Error("must be >= " + std::to_string(min) + ", got " + entry + in, option);
    for (int64_t seen : out)
      if (seen == v) throw Error(entry + " is given twice" + in, option);
    out.push_back(v);
  }
  return out;
}

namespace {

// The entries of `text` as values of `names` (each a name and its value), in their order: an
// entry that is none of the names is an Error naming `option` and the names ("off or blocks").
template <class T>
std::vector<T> parse_choices(const std::string& text, const std::string& option,
                             const std::vector<std::pair<std::string, T>>& names) {
  std::string list = names.front().first;  // "cpu, gpu or auto"
  for (size_t i = 1; i < names.size(); ++i) list += (i + 1 == names.size() ? " or " : ", ") + names[i].first;
  std::vector<T> out;
  for (const std::string& e : entries(text, option)) {
    const auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == e; });
    if (it == names.end()) throw Error("'" + e + "' is not " + list + " (in '" + text + "')", option);
    out.push_back(it->second);
  }
  return out;
}

}  // namespace

std::vector<ActivationCheckpointing> parse_checkpointing(const std::string& text) {
  return parse_choices<ActivationCheckpointing>(
      text, "--activation-checkpointing",
      {{"off", ActivationCheckpointing::kOff}, {"blocks", ActivationCheckpointing::kBlocks}});
}

std::vector<DecodeMode> parse_decode(const std::string& text) {
  return parse_choices<DecodeMode>(
      text, "--decode", {{"cpu", DecodeMode::kCpu}, {"gpu", DecodeMode::kGpu}, {"auto", DecodeMode::kAuto}});
}

std::vector<bool> parse_sharding(const std::string& text) {
  return parse_choices<bool>(text, "--shard-optimizer", {{"false", false}, {"true", true}});
}

const std::vector<std::string>& bench_keys() {
  static const std::vector<std::string> keys = {
      "run.dir",          "run.log_every",           "run.quiet",       "run.profile_steps",
      "run.timeline",     "train.epochs",            "train.max_steps", "train.eval",
      "train.drop_last",  "checkpoint.every_steps",  "checkpoint.every_epoch",
      "checkpoint.keep",  "checkpoint.dir",          "checkpoint.resume"};
  return keys;
}

SweepPlan plan_sweep(const Config& base, const std::vector<std::string>& overrides,
                     const SweepOptions& o, int world) {
  const std::set<std::string> given = override_keys(overrides);
  for (const std::string& k : bench_keys())
    if (given.count(k))
      throw Error("dtrain bench sets this key for every setting (it writes no files, resumes "
                  "nothing, skips evaluation and runs --warmup-steps + --steps steps); leave it "
                  "off the command line",
                  k);
  if (!o.micro_batches.empty() && given.count("train.micro_batch"))
    throw Error("is given on the command line and swept by --micro-batches; give one of them",
                "train.micro_batch");
  if (!o.workers.empty() && given.count("data.workers"))
    throw Error("is given on the command line and swept by --workers; give one of them",
                "data.workers");
  if (!o.checkpointing.empty() && given.count("train.activation_checkpointing"))
    throw Error("is given on the command line and swept by --activation-checkpointing; give one "
                "of them",
                "train.activation_checkpointing");
  if (!o.shard_optimizer.empty() && given.count("dist.shard_optimizer"))
    throw Error("is given on the command line and swept by --shard-optimizer; give one of them",
                "dist.shard_optimizer");
  if (!o.decode.empty() && given.count("data.decode"))
    throw Error("is given on the command line and swept by --decode; give one of them", "data.decode");
  if (!o.decode.empty() && base.data.format != DataFormat::kImageFolder)
    throw Error(std::string("data.format is ") + to_string(base.data.format) +
                    ": only an image folder's images are decoded (data.decode)",
                "--decode");
  constexpr int64_t kMaxSteps = 1000000000;
  if (o.warmup_steps < 0 || o.warmup_steps > kMaxSteps)
    throw Error("must be in [0, 1e9], got " + std::to_string(o.warmup_steps), "--warmup-steps");
  if (o.steps < 1 || o.steps > kMaxSteps)
    throw Error("must be in [1, 1e9], got " + std::to_string(o.steps), "--steps");

  SweepPlan plan;
  const bool sweeps_micro = !o.micro_batches.empty();
  plan.rule = !sweeps_micro                       ? GlobalBatch::kConfig
              : given.count("train.global_batch") ? GlobalBatch::kFixed
                                                  : GlobalBatch::kMicroTimesWorld;
  const std::vector<int64_t> micros = sweeps_micro ? o.micro_batches
                                                   : std::vector<int64_t>{base.train.micro_batch};
  const std::vector<int64_t> workers = o.workers.empty() ? std::vector<int64_t>{base.data.workers}
                                                         : o.workers;
  const std::vector<ActivationCheckpointing> ckpts =
      o.checkpointing.empty() ? std::vector<ActivationCheckpointing>{base.train.activation_checkpointing}
                              : o.checkpointing;
  const std::vector<bool> shards =
      o.shard_optimizer.empty() ? std::vector<bool>{base.dist.shard_optimizer} : o.shard_optimizer;
  const std::vector<DecodeMode> decoders =
      o.decode.empty() ? std::vector<DecodeMode>{base.data.decode} : o.decode;
  plan.ladder = !o.checkpointing.empty() || !o.shard_optimizer.empty();
  plan.decoders = !o.decode.empty();
  const int64_t total = o.warmup_steps + o.steps;
  // One setting of the cross product, checked by resolving a copy.
  auto setting = [&](int64_t micro, int64_t w, ActivationCheckpointing ckpt, bool shard, DecodeMode decode) {
    Setting st;
    st.config = base;
    Config& c = st.config;
    if (sweeps_micro) {
      c.train.micro_batch = micro;
      if (plan.rule == GlobalBatch::kMicroTimesWorld) {
        if (micro > std::numeric_limits<int64_t>::max() / world)
          throw Error(std::to_string(micro) + " x " + std::to_string(world) +
                          " ranks overflows the global batch",
                      "--micro-batches");
        c.train.global_batch = micro * world;
      }
    }
    c.data.workers = w;
    c.train.activation_checkpointing = ckpt;
    c.dist.shard_optimizer = shard;
    c.data.decode = decode;
    c.run.dir = "";
    c.run.log_every = 0;
    c.run.quiet = true;
    c.run.profile_steps = 0;
    c.run.timeline = false;
    c.train.epochs = total;  // every epoch has a step: max_steps ends the run
    c.train.max_steps = total;
    c.train.eval = false;
    c.train.drop_last = true;
    c.checkpoint.every_steps = 0;
    c.checkpoint.every_epoch = false;
    c.checkpoint.dir = "";
    c.checkpoint.resume = "none";
    Config check = c;
    try {
      check.resolve(world);
    } catch (const Error& e) {
      if (!sweeps_micro) throw;
      throw Error("micro-batch " + std::to_string(micro) + " on " + std::to_string(world) +
                      " rank(s): " + e.what(),
                  "--micro-batches");
    }
    st.micro_batch = c.train.micro_batch;
    st.workers = w;
    st.checkpointing = ckpt;
    st.shard_optimizer = shard;
    st.decode = decode;
    st.global_batch = c.train.global_batch;
    st.rank_batch = check.resolved.rank_batch;
    st.accum_steps = check.resolved.accum_steps;
    return st;
  };
  for (int64_t micro : micros)
    for (int64_t w : workers)
      for (ActivationCheckpointing ckpt : ckpts)
        for (bool shard : shards)
          for (DecodeMode decode : decoders) plan.settings.push_back(setting(micro, w, ckpt, shard, decode));
  return plan;
}

// Note [does not fit]: the bench must measure the size it was asked for, so the Trainer's
// out-of-memory recovery is off. A step that runs out of memory on any rank is then, after the
// ranks agreed on it (Note [out-of-memory protocol]), a MicroBatchDoesNotFit thrown on every
// rank at the same step, with no collective left open: every rank records "does not fit" and
// goes on to the next setting together. On CPU, LibTorch's allocator failing ("can't allocate
// memory", what the host-memory guard turns into an Error elsewhere) is such an out-of-memory
// error. Any other failure, or one a single rank saw outside the step's agreement (with several
// ranks), cannot be known to every rank: it ends the job under dtrain's error policy, naming the
// setting. With one rank, every out-of-memory error is "does not fit". Between settings the
// CUDA allocator's cached blocks go back to the device, so one setting's leftovers do not
// crowd the next.
namespace {

Row run_setting(Runtime& rt, const Setting& st, const std::string& origin, const SweepOptions& o,
                const PrepareTrainer& prepare, SweepResult& result, const std::string& name) {
  Row row;
  row.micro_batch = st.micro_batch;
  row.workers = st.workers;
  row.checkpointing = st.checkpointing;
  row.shard_optimizer = st.shard_optimizer;
  row.decode = st.decode;
  row.global_batch = st.global_batch;
  row.accum_steps = st.accum_steps;
  Session s = build_session(rt, st.config, origin);
  if (result.device.empty())
    result.device = rt.device().is_cuda() ? detail::device_name(rt.device().index()) : "cpu";
  auto timer = std::make_shared<StepTimer>(o.warmup_steps, o.steps, s.config.run.gpu_sample_s);
  s.trainer->add_hook(timer);
  // One diagnosis per setting would bury the table: the bench's own line and row say it.
  s.trainer->remove_hook("report");
  s.trainer->set_out_of_memory_recovery(false);
  if (prepare) prepare(*s.trainer, st);
  std::string no_fit;
  try {
    s.trainer->fit();
  } catch (const detail::MicroBatchDoesNotFit& e) {
    no_fit = "out of memory at step " + std::to_string(e.step()) + (rt.world() > 1 ? " (on some rank)" : "");
  } catch (const Error& e) {
    throw Error(name + ": " + e.cause(), e.where());
  } catch (const std::exception& e) {
    if (rt.world() > 1 || !detail::is_out_of_memory(e))
      throw Error(name + ": " + detail::first_line(e.what()));
    no_fit = "out of memory (" + detail::first_line(e.what()) + ")";
  }
  const Timing& t = timer->timing();
  if (t.tokens_per_sample > 0) result.tokens_per_sample = t.tokens_per_sample;
  if (no_fit.empty()) {
    fill_row(t, rt.cpu_comm(), row);
  } else {
    row.fits = false;
    row.note = "does not fit: " + no_fit;
    if (st.micro_batch < 0 && t.micro_batch > 0) row.micro_batch = t.micro_batch;
  }
  if (st.micro_batch == 0) row.micro_batch = st.rank_batch;
  if (row.micro_batch > 0) row.accum_steps = st.rank_batch / row.micro_batch;
  return row;
}

}  // namespace

SweepResult run_sweep(Runtime& rt, const SweepPlan& plan, const std::string& origin,
                      const SweepOptions& o, const PrepareTrainer& prepare) {
  log::configure(rt.rank(), /*quiet=*/true);  // as each setting's session does: rank 0 speaks
  SweepResult result;
  result.config = origin;
  result.world = rt.world();
  result.rule = plan.rule;
  result.ladder = plan.ladder;
  result.decoders = plan.decoders;
  result.warmup_steps = o.warmup_steps;
  result.steps = o.steps;
  const size_t n = plan.settings.size();
  for (size_t i = 0; i < n; ++i) {
    const Setting& st = plan.settings[i];
    const std::string what = describe(st, rt.world());
    log::info(detail::format("bench %zu/%zu: ", i + 1, n) + what);
    Row row = run_setting(rt, st, origin, o, prepare, result, "bench setting " + what);
    detail::empty_cache(rt.device());
    if (row.fits)
      log::info(detail::format("  bench: %.1f samples/s over the %lld timed steps (the table's "
                               "figure; after %lld warm-up steps), %.2f ms per step",
                               row.samples_per_s, static_cast<long long>(o.steps),
                               static_cast<long long>(o.warmup_steps), row.step_mean_s * 1e3));
    else
      log::info("  " + row.note);
    result.rows.push_back(std::move(row));
  }
  return result;
}

}  // namespace dtrain::bench
