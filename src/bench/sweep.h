// The sweep behind `dtrain bench`: for each combination of the values of the swept config keys
// (`--sweep key=v1,v2`, or its aliases: the micro-batch, the loader workers, the rungs of the
// memory ladder, train.activation_checkpointing and dist.shard_optimizer: Note [memory ladder],
// and the image decoder, data.decode: Note [GPU decoding]), a short timed run of the real
// training loop (build_session and Trainer::fit, as `dtrain CONFIG` runs), a fresh model and
// optimizer from run.seed each time, so that settings compare. Every rank runs every setting (a
// collective sweep); each row holds figures over all ranks.
//
// A setting is the config with the swept values set, each parsed and range-checked by the
// schema as the same `key=value` on the command line would be, and the bench's keys set
// (bench_keys()): nothing is written, nothing is resumed, no evaluation, train.drop_last (every
// step has the size asked for), and train.max_steps = warm-up + timed steps. Out-of-memory
// recovery is off: a size that runs out of memory on any rank is "does not fit" on every rank at
// the same step, and the sweep goes on (Note [does not fit]).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/runtime.h"
#include "dtrain/trainer.h"

namespace dtrain::bench {

// One swept key: its values as the command line wrote them.
struct KeySweep {
  std::string key;     // "data.workers"
  std::string option;  // the option that gave it, for errors: "--sweep" or an alias ("--workers")
  std::string text;    // as given ("data.workers=0,2" for --sweep, "0,2" for an alias)
  std::vector<std::string> values;
};

// --sweep's "key=v1,v2,...": the key and its values, each once, at least one (a value holding
// commas is written in brackets: model.hidden=[64,32],[128]). Anything else is an Error naming
// --sweep and the entry. Whether the key exists and the values fit it is plan_sweep's check.
KeySweep parse_sweep(const std::string& text);

// The older options, each an alias of --sweep for one key: --micro-batches (train.micro_batch;
// whole numbers >= 1), --workers (data.workers; whole numbers >= 0), --activation-checkpointing
// (train.activation_checkpointing), --shard-optimizer (dist.shard_optimizer), --decode
// (data.decode), in this order.
struct SweepAlias {
  const char* option;
  const char* key;
  const char* help;
  int64_t min;  // the whole numbers' least value; kNotSizes: the schema alone judges the values
};
constexpr int64_t kNotSizes = -1;
const std::vector<SweepAlias>& sweep_aliases();
// `text` given to alias `option` ("--workers", "0,2"): the same as --sweep data.workers=0,2,
// but a list of sizes is checked as parse_sizes() does. An unknown option is an internal Error.
KeySweep parse_alias(const std::string& option, const std::string& text);

struct SweepOptions {
  // The sweeps, crossed in this order (the first outermost): the CLI puts its aliases first, in
  // sweep_aliases()'s order, then --sweep's in the order given. Empty: the config as it is.
  std::vector<KeySweep> sweeps;
  // A C++ caller's shorthand for --micro-batches (parse_alias's sweep of train.micro_batch, put
  // first); tests/dist/test_bench.cpp sets it. Empty: none.
  std::vector<int64_t> micro_batches;
  int64_t warmup_steps = 5;  // steps run before the clock starts
  int64_t steps = 20;        // steps timed
};

// "32,64,128" as `option` takes it: integers >= `min`, no duplicates, at least one. Anything
// else is an Error naming `option` and the entry.
std::vector<int64_t> parse_sizes(const std::string& text, const std::string& option, int64_t min);

// How a setting's train.global_batch was chosen.
enum class GlobalBatch {
  kMicroTimesWorld,  // micro-batch x world: one micro-batch per rank, no accumulation
  kFixed,            // train.global_batch given on the command line: accumulation varies
  kConfig,           // no micro-batch sweep: the config's
  kSwept,            // train.global_batch is swept
};
const char* to_string(GlobalBatch rule);

// The keys with columns of their own in the bench's outputs (micro-batch, workers, global batch,
// and the ladder's and the decoder's, which the table shows when swept and the CSV and JSON
// always); any other swept key gets a column named by the key.
bool has_own_column(const std::string& key);

struct Setting {
  // Each swept key and its value in this setting, as the schema's dump writes it, in the
  // sweeps' order.
  std::vector<std::pair<std::string, std::string>> values;
  int64_t micro_batch = 0;  // as train.micro_batch takes it (0: the rank batch; -1: auto)
  int64_t workers = 0;      // data.workers
  int64_t global_batch = 0;
  int64_t rank_batch = 0;
  int64_t accum_steps = 0;  // 0 while `auto` is not measured
  Config config;            // unresolved; the swept values and the bench's keys set
};

struct SweepPlan {
  // The cross product of the sweeps, the first outermost.
  std::vector<Setting> settings;
  GlobalBatch rule = GlobalBatch::kConfig;
  bool ladder = false;            // train.activation_checkpointing or dist.shard_optimizer is swept
  bool decoders = false;          // data.decode is swept
  std::vector<std::string> keys;  // the swept keys without a column of their own, in order
  // The config's train.global_batch and train.lr (with the command line's overrides), against
  // which a recommended setting's global batch is a change of the training recipe.
  int64_t config_global_batch = 0;
  double config_lr = 0;
};

// The keys a setting sets, which the command line must not give (an Error names the key):
// run.dir, run.log_every, run.quiet, run.profile_steps, run.timeline, train.epochs,
// train.max_steps, train.eval, train.drop_last, and checkpoint.*.
const std::vector<std::string>& bench_keys();

// The settings for `world` ranks: `base` is the config with `overrides` applied (the same list,
// to tell which keys the command line gave). Errors name the key or the option: a key the
// schema does not know (with the closest one), a value it refuses (as on the command line), a
// key the bench sets (bench_keys()), one swept twice or also given as an override, one that does
// not apply to this run (the schema's applicability: e.g. data.decode on data that is not an
// image folder). Each setting is checked by resolving a copy: a micro-batch that does not
// divide a fixed per-rank batch is an Error naming the micro-batch's option. A micro-batch sweep
// without train.global_batch on the command line or swept sets the global batch to
// micro-batch x world (then each micro-batch must be a size, >= 1).
SweepPlan plan_sweep(const Config& base, const std::vector<std::string>& overrides,
                     const SweepOptions& options, int world);

// One setting's figures over all ranks.
struct Row {
  int64_t micro_batch = 0;  // samples per forward/backward on one rank (auto: as measured)
  int64_t workers = 0;
  int64_t global_batch = 0;
  int64_t accum_steps = 0;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kOff;
  ShardOptimizer shard_optimizer = ShardOptimizer::kOff;
  DecodeMode decode = DecodeMode::kCpu;
  // The swept keys without a column of their own (SweepPlan::keys) and their values.
  std::vector<std::pair<std::string, std::string>> keys;
  bool fits = true;
  std::string note;  // why it does not fit ("out of memory at step 0 ...")
  int64_t timed_steps = 0;
  int64_t timed_samples = 0;              // global samples in the timed steps
  double timed_seconds = 0;               // the slowest rank's, between synchronized points
  double samples_per_s = 0;               // global: timed_samples / timed_seconds
  double tokens_per_s = 0;                // samples/s x tokens per sample; 0: not a sequence model
  double step_mean_s = 0;                 // timed_seconds / timed_steps
  double step_p50_s = 0, step_p90_s = 0;  // of each step's host time; the largest over ranks
  double data_wait_share = 0;  // share of the timed seconds spent waiting for the loader (max)
  int64_t peak_memory = 0;     // bytes allocated at the peak on the fullest GPU; 0 on CPU
  int64_t memory_total = 0;    // the largest GPU's bytes (max over ranks); 0 on CPU
  std::optional<double> gpu_utilization;  // NVML percent, mean over ranks and the timed steps
  std::optional<double> mfu;              // model FLOP/s over peak FLOP/s, when both are known
  // For the scaling forecast (--forecast, bench/scaling.h): the least communication phase per
  // timed step over the ranks; this rank's mean bucket timeline of the timed steps (else of the
  // warm-up's last step that had one) and over how many steps; its parameters' and gradients'
  // bytes.
  double comm_per_step_s = 0;
  std::vector<BucketTiming> buckets;
  double backward_end = 0;
  int64_t timeline_steps = 0;
  int64_t weight_bytes = 0, gradient_bytes = 0;
};

struct SweepResult {
  std::string config;  // the config file
  int world = 1;
  std::string device;  // rank 0's: "cpu", "NVIDIA H200"
  int64_t tokens_per_sample = 0;
  GlobalBatch rule = GlobalBatch::kConfig;
  bool ladder = false;            // the table shows the rungs' columns
  bool decoders = false;          // the table shows the decode column
  std::vector<std::string> keys;  // the other swept keys, a column each (SweepPlan::keys)
  int64_t warmup_steps = 0, steps = 0;
  int64_t config_global_batch = 0;  // SweepPlan's
  double config_lr = 0;
  std::vector<Row> rows;  // in the plan's order
};

// Called with each setting's Trainer before it trains (tests set a FaultInjector there).
using PrepareTrainer = std::function<void(Trainer&, const Setting&)>;

// Runs every setting on every rank (collective). `origin` names the config in logs and errors.
// A setting that does not fit gives a row with fits = false; any other failure is an Error
// naming the setting.
SweepResult run_sweep(Runtime& rt, const SweepPlan& plan, const std::string& origin,
                      const SweepOptions& options, const PrepareTrainer& prepare = {});

}  // namespace dtrain::bench
