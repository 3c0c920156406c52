#include "bench/sweep.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "bench/step_timer.h"
#include "config/schema.h"
#include "cuda/device.h"
#include "cuda/memory.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/session.h"
#include "train/recovery.h"
#include "train/start_up_memory.h"
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
  const std::string micro = s.micro_batch < 0    ? std::string("auto")
                            : s.micro_batch == 0 ? std::to_string(s.rank_batch)
                                                 : std::to_string(s.micro_batch);
  std::string d = "micro-batch " + micro + " per rank x " + std::to_string(world) +
                  " rank(s), global batch " + std::to_string(s.global_batch);
  if (s.accum_steps > 1) d += " (" + std::to_string(s.accum_steps) + " accumulation steps)";
  d += ", data.workers " + std::to_string(s.workers);
  const Config& c = s.config;
  if (c.train.activation_checkpointing != ActivationCheckpointing::kOff)
    d += ", train.activation_checkpointing blocks";
  if (c.dist.shard_optimizer != ShardOptimizer::kOff)
    d += std::string(", dist.shard_optimizer=") + to_string(c.dist.shard_optimizer);
  if (c.data.decode != DecodeMode::kCpu)
    d += std::string(", data.decode ") + to_string(c.data.decode);
  for (const auto& [key, value] : s.values)
    if (!has_own_column(key)) d += ", " + key + " " + value;
  return d;
}

}  // namespace

const char* to_string(GlobalBatch rule) {
  switch (rule) {
    case GlobalBatch::kMicroTimesWorld:
      return "micro_batch x world";
    case GlobalBatch::kFixed:
      return "fixed (train.global_batch on the command line)";
    case GlobalBatch::kConfig:
      return "the config's";
    case GlobalBatch::kSwept:
      return "swept (train.global_batch)";
  }
  return "?";
}

namespace {

// The comma-separated entries of `text` (commas inside brackets do not separate), trimmed, each
// once: an Error naming `option` for an empty list, an empty entry or one given twice.
std::vector<std::string> entries(const std::string& text, const std::string& option) {
  const std::string in = " (in '" + text + "')";
  if (trim(text).empty()) throw Error("needs a comma-separated list, got '" + text + "'", option);
  std::vector<std::string> out;
  size_t begin = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char ch = i < text.size() ? text[i] : ',';
    if (ch == '[') ++depth;
    if (ch == ']' && depth > 0) --depth;
    if (ch != ',' || (depth > 0 && i < text.size())) continue;
    const std::string entry = trim(text.substr(begin, i - begin));
    if (entry.empty()) throw Error("an empty entry" + in, option);
    for (const std::string& seen : out)
      if (seen == entry) throw Error(entry + " is given twice" + in, option);
    out.push_back(entry);
    begin = i + 1;
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
    if (v < min) throw Error("must be >= " + std::to_string(min) + ", got " + entry + in, option);
    for (int64_t seen : out)
      if (seen == v) throw Error(entry + " is given twice" + in, option);
    out.push_back(v);
  }
  return out;
}

KeySweep parse_sweep(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || trim(text.substr(0, eq)).empty())
    throw Error("needs section.key=v1,v2,..., got '" + text + "'", "--sweep");
  KeySweep s;
  s.key = trim(text.substr(0, eq));
  s.option = "--sweep";
  s.text = text;
  s.values = entries(text.substr(eq + 1), "--sweep");
  return s;
}

const std::vector<SweepAlias>& sweep_aliases() {
  static const std::vector<SweepAlias> aliases = {
      {"--micro-batches", "train.micro_batch", "micro-batch sizes per rank to time, e.g. 32,64,128",
       1},
      {"--workers", "data.workers", "data.workers values to time, e.g. 0,2,4", 0},
      {"--activation-checkpointing", "train.activation_checkpointing",
       "train.activation_checkpointing values to time: off,blocks (the memory ladder)", kNotSizes},
      {"--shard-optimizer", "dist.shard_optimizer",
       "dist.shard_optimizer values to time: false,true,gradients (the memory ladder)", kNotSizes},
      {"--decode", "data.decode",
       "data.decode values to time: cpu,gpu (an image folder's decoders)", kNotSizes}};
  return aliases;
}

KeySweep parse_alias(const std::string& option, const std::string& text) {
  for (const SweepAlias& a : sweep_aliases()) {
    if (option != a.option) continue;
    KeySweep s;
    s.key = a.key;
    s.option = option;
    s.text = text;
    if (a.min == kNotSizes) {
      s.values = entries(text, option);
    } else {
      for (int64_t v : parse_sizes(text, option, a.min)) s.values.push_back(std::to_string(v));
    }
    return s;
  }
  throw Error("not an alias of --sweep (internal error)", option);
}

bool has_own_column(const std::string& key) {
  for (const SweepAlias& a : sweep_aliases())
    if (key == a.key) return true;
  return key == "train.global_batch";
}

const std::vector<std::string>& bench_keys() {
  static const std::vector<std::string> keys = {"run.dir",
                                                "run.log_every",
                                                "run.quiet",
                                                "run.profile_steps",
                                                "run.timeline",
                                                "train.epochs",
                                                "train.max_steps",
                                                "train.eval",
                                                "train.drop_last",
                                                "checkpoint.every_steps",
                                                "checkpoint.every_epoch",
                                                "checkpoint.keep",
                                                "checkpoint.dir",
                                                "checkpoint.resume"};
  return keys;
}

namespace {

// "" when a run with `c` reads `key`, else why not (the schema's applicability).
std::string not_applying(const std::string& key, const Config& c) {
  const config::Field* f = config::find_field(key);
  if (f == nullptr) return "";
  if (f->applies == config::Applies::kWhen) return f->unused_because(c);
  if (f->applies == config::Applies::kModel) {
    const std::optional<std::vector<std::string>> reads = model_keys(c.model.name);
    if (reads && std::find(reads->begin(), reads->end(), key) == reads->end())
      return "model.name is " + c.model.name;
  }
  return "";
}

const KeySweep* swept(const std::vector<KeySweep>& sweeps, const std::string& key) {
  for (const KeySweep& s : sweeps)
    if (s.key == key) return &s;
  return nullptr;
}

// The options' sweeps, SweepOptions::micro_batches first as its alias would give it.
std::vector<KeySweep> all_sweeps(const SweepOptions& o) {
  std::vector<KeySweep> sweeps;
  if (!o.micro_batches.empty()) {
    std::string text;
    for (int64_t m : o.micro_batches) text += (text.empty() ? "" : ",") + std::to_string(m);
    sweeps.push_back(parse_alias("--micro-batches", text));
  }
  sweeps.insert(sweeps.end(), o.sweeps.begin(), o.sweeps.end());
  return sweeps;
}

}  // namespace

SweepPlan plan_sweep(const Config& base, const std::vector<std::string>& overrides,
                     const SweepOptions& o, int world) {
  const std::set<std::string> given = override_keys(overrides);
  const std::vector<KeySweep> sweeps = all_sweeps(o);
  for (const std::string& k : bench_keys())
    if (given.count(k))
      throw Error(
          "dtrain bench sets this key for every setting (it writes no files, resumes "
          "nothing, skips evaluation and runs --warmup-steps + --steps steps); leave it "
          "off the command line",
          k);
  for (size_t i = 0; i < sweeps.size(); ++i) {
    const KeySweep& s = sweeps[i];
    if (std::find(bench_keys().begin(), bench_keys().end(), s.key) != bench_keys().end())
      throw Error(
          "dtrain bench sets this key for every setting (it writes no files, resumes "
          "nothing, skips evaluation and runs --warmup-steps + --steps steps); it cannot "
          "be swept (" +
              s.option + " '" + s.text + "')",
          s.key);
    if (given.count(s.key))
      throw Error("is given on the command line and swept by " + s.option + "; give one of them",
                  s.key);
    for (size_t j = 0; j < i; ++j)
      if (sweeps[j].key == s.key)
        throw Error("is swept by " + sweeps[j].option + " and by " + s.option + "; give one list",
                    s.key);
  }
  constexpr int64_t kMaxSteps = 1000000000;
  if (o.warmup_steps < 0 || o.warmup_steps > kMaxSteps)
    throw Error("must be in [0, 1e9], got " + std::to_string(o.warmup_steps), "--warmup-steps");
  if (o.steps < 1 || o.steps > kMaxSteps)
    throw Error("must be in [1, 1e9], got " + std::to_string(o.steps), "--steps");

  SweepPlan plan;
  plan.config_global_batch = base.train.global_batch;
  plan.config_lr = base.train.lr;
  const KeySweep* micro = swept(sweeps, "train.micro_batch");
  plan.rule = swept(sweeps, "train.global_batch") ? GlobalBatch::kSwept
              : micro == nullptr                  ? GlobalBatch::kConfig
              : given.count("train.global_batch") ? GlobalBatch::kFixed
                                                  : GlobalBatch::kMicroTimesWorld;
  plan.ladder =
      swept(sweeps, "train.activation_checkpointing") || swept(sweeps, "dist.shard_optimizer");
  plan.decoders = swept(sweeps, "data.decode") != nullptr;
  for (const KeySweep& s : sweeps)
    if (!has_own_column(s.key)) plan.keys.push_back(s.key);
  const int64_t total = o.warmup_steps + o.steps;
  // One setting of the cross product (value pick[i] of sweep i), checked by resolving a copy.
  auto setting = [&](const std::vector<size_t>& pick) {
    Setting st;
    st.config = base;
    Config& c = st.config;
    for (size_t i = 0; i < sweeps.size(); ++i) {
      const KeySweep& s = sweeps[i];
      const std::string& v = s.values[pick[i]];
      config::set_from_text(c, s.key, v, s.option + " '" + s.text + "'");
      st.values.emplace_back(s.key, config::find_field(s.key)->get(c));
    }
    if (micro != nullptr && plan.rule == GlobalBatch::kMicroTimesWorld) {
      const int64_t m = c.train.micro_batch;
      if (m < 1)
        throw Error("global batch = micro-batch x ranks needs a size >= 1, got " +
                        config::find_field("train.micro_batch")->get(c) +
                        "; give train.global_batch=N on the command line to time it",
                    micro->option);
      if (m > std::numeric_limits<int64_t>::max() / world)
        throw Error(
            std::to_string(m) + " x " + std::to_string(world) + " ranks overflows the global batch",
            micro->option);
      c.train.global_batch = m * world;
    }
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
    for (const KeySweep& s : sweeps) {
      const std::string why = not_applying(s.key, c);
      if (!why.empty())
        throw Error(s.key + " does not apply to this run (" + why +
                        "): a run reads it only where the schema "
                        "says (dtrain --help), so every setting would time the same",
                    s.option);
    }
    Config check = c;
    try {
      check.resolve(world);
    } catch (const Error& e) {
      if (micro == nullptr) throw;
      throw Error("micro-batch " + config::find_field("train.micro_batch")->get(c) + " on " +
                      std::to_string(world) + " rank(s): " + e.what(),
                  micro->option);
    }
    st.micro_batch = c.train.micro_batch;
    st.workers = c.data.workers;
    st.global_batch = c.train.global_batch;
    st.rank_batch = check.resolved.rank_batch;
    st.accum_steps = check.resolved.accum_steps;
    return st;
  };
  // The cross product, as an odometer: the last sweep turns fastest.
  std::vector<size_t> pick(sweeps.size(), 0);
  for (;;) {
    plan.settings.push_back(setting(pick));
    size_t i = pick.size();
    while (i > 0 && ++pick[i - 1] == sweeps[i - 1].values.size()) pick[--i] = 0;
    if (i == 0) break;
  }
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
// setting. With one rank, every out-of-memory error is "does not fit". Out of memory in the
// start-up (the Trainer's allocations, the first step before its update: StateDoesNotFit, Note
// [memory ladder]) is agreed too, and "does not fit" alike. Between settings the
// CUDA allocator's cached blocks go back to the device, so one setting's leftovers do not
// crowd the next.
namespace {

// Out of memory in the start-up (Note [memory ladder]): every rank knows it, at the same point.
std::string before_first_step(const detail::StateDoesNotFit& e, int world) {
  return "out of memory in the start-up" +
         (world > 1 ? " (on rank " + std::to_string(e.first_rank()) + ")" : std::string());
}

Row run_setting(Runtime& rt, const Setting& st, const std::string& origin, const SweepOptions& o,
                const PrepareTrainer& prepare, SweepResult& result, const std::string& name) {
  Row row;
  row.micro_batch = st.micro_batch;
  row.workers = st.workers;
  row.checkpointing = st.config.train.activation_checkpointing;
  row.shard_optimizer = st.config.dist.shard_optimizer;
  row.decode = st.config.data.decode;
  for (const auto& kv : st.values)
    if (!has_own_column(kv.first)) row.keys.push_back(kv);
  row.global_batch = st.global_batch;
  row.accum_steps = st.accum_steps;
  std::string no_fit;
  Session s;
  try {
    s = build_session(rt, st.config, origin);
  } catch (const detail::StateDoesNotFit& e) {
    no_fit = before_first_step(e, rt.world());
  }
  if (result.device.empty())
    result.device = rt.device().is_cuda() ? detail::device_name(rt.device().index()) : "cpu";
  auto timer = std::make_shared<StepTimer>(o.warmup_steps, o.steps, s.config.run.gpu_sample_s);
  if (no_fit.empty()) {
    s.trainer->add_hook(timer);
    // One diagnosis per setting would bury the table: the bench's own line and row say it.
    s.trainer->remove_hook("report");
    // No evaluation in a bench: no best model, no early stop, and no lines about them.
    s.trainer->remove_hook("best_model");
    // The bench sets the run's length itself: warnings that train.warmup_steps or
    // train.max_steps do not fit it concern the config's training, not this timing.
    s.trainer->set_length_warnings(false);
    s.trainer->set_out_of_memory_recovery(false);
    if (prepare) prepare(*s.trainer, st);
    try {
      s.trainer->fit();
    } catch (const detail::StateDoesNotFit& e) {
      no_fit = before_first_step(e, rt.world());
    } catch (const detail::MicroBatchDoesNotFit& e) {
      no_fit = "out of memory at step " + std::to_string(e.step()) +
               (rt.world() > 1 ? " (on some rank)" : "");
    } catch (const Error& e) {
      throw Error(name + ": " + e.cause(), e.where());
    } catch (const std::exception& e) {
      if (rt.world() > 1 || !detail::is_out_of_memory(e))
        throw Error(name + ": " + detail::first_line(e.what()));
      no_fit = "out of memory (" + detail::first_line(e.what()) + ")";
    }
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
  result.keys = plan.keys;
  result.warmup_steps = o.warmup_steps;
  result.steps = o.steps;
  result.config_global_batch = plan.config_global_batch;
  result.config_lr = plan.config_lr;
  const size_t n = plan.settings.size();
  for (size_t i = 0; i < n; ++i) {
    const Setting& st = plan.settings[i];
    const std::string what = describe(st, rt.world());
    log::info(detail::format("bench %zu/%zu: ", i + 1, n) + what);
    Row row = run_setting(rt, st, origin, o, prepare, result, "bench setting " + what);
    detail::empty_cache(rt.device());
    if (row.fits)
      log::info(
          detail::format("  bench: %.1f samples/s over the %lld timed steps (the table's "
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
