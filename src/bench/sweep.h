// The sweep behind `dtrain bench`: for each micro-batch, loader-worker count, rung of the memory
// ladder (train.activation_checkpointing, dist.shard_optimizer: Note [memory ladder]) and image
// decoder (data.decode: Note [GPU decoding]) asked for, a short
// timed run of the real training loop (build_session and Trainer::fit, as `dtrain CONFIG` runs),
// a fresh model and optimizer from run.seed each time, so that settings compare. Every rank
// runs every setting (a collective sweep); each row holds figures over all ranks.
//
// A setting is the config with the bench's keys set (bench_keys()): nothing is written, nothing
// is resumed, no evaluation, train.drop_last (every step has the size asked for), and
// train.max_steps = warm-up + timed steps. Out-of-memory recovery is off: a size that runs out of
// memory on any rank is "does not fit" on every rank at the same step, and the sweep goes on
// (Note [does not fit]).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/runtime.h"
#include "dtrain/trainer.h"

namespace dtrain::bench {

struct SweepOptions {
  std::vector<int64_t> micro_batches;  // empty: the config's train.micro_batch
  std::vector<int64_t> workers;        // empty: the config's data.workers
  // --activation-checkpointing off,blocks; --shard-optimizer false,true (empty: the config's)
  std::vector<ActivationCheckpointing> checkpointing;
  std::vector<bool> shard_optimizer;
  std::vector<DecodeMode> decode;      // --decode cpu,gpu (empty: the config's data.decode)
  int64_t warmup_steps = 5;            // steps run before the clock starts
  int64_t steps = 20;                  // steps timed
};

// "32,64,128" as `option` takes it: integers >= `min`, no duplicates, at least one. Anything
// else is an Error naming `option` and the entry.
std::vector<int64_t> parse_sizes(const std::string& text, const std::string& option, int64_t min);
// "off,blocks" (--activation-checkpointing) and "false,true" (--shard-optimizer): each value once,
// at least one; anything else is an Error naming the option and the entry.
std::vector<ActivationCheckpointing> parse_checkpointing(const std::string& text);
std::vector<bool> parse_sharding(const std::string& text);
// "cpu,gpu" (--decode; auto too): each value once, at least one; likewise.
std::vector<DecodeMode> parse_decode(const std::string& text);

// How a setting's train.global_batch was chosen.
enum class GlobalBatch {
  kMicroTimesWorld,  // micro-batch x world: one micro-batch per rank, no accumulation
  kFixed,            // train.global_batch given on the command line: accumulation varies
  kConfig,           // no micro-batch sweep: the config's
};
const char* to_string(GlobalBatch rule);

struct Setting {
  int64_t micro_batch = 0;  // as train.micro_batch takes it (0: the rank batch; -1: auto)
  int64_t workers = 0;      // data.workers
  int64_t global_batch = 0;
  int64_t rank_batch = 0;
  int64_t accum_steps = 0;  // 0 while `auto` is not measured
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kOff;
  bool shard_optimizer = false;
  DecodeMode decode = DecodeMode::kCpu;
  Config config;            // unresolved; the bench's keys set
};

struct SweepPlan {
  // The cross product: micro-batches outermost, then workers, activation checkpointing, sharding,
  // decoders.
  std::vector<Setting> settings;
  GlobalBatch rule = GlobalBatch::kConfig;
  bool ladder = false;    // --activation-checkpointing or --shard-optimizer was given
  bool decoders = false;  // --decode was given
};

// The keys a setting sets, which the command line must not give (an Error names the key):
// run.dir, run.log_every, run.quiet, run.profile_steps, run.timeline, train.epochs,
// train.max_steps, train.eval, train.drop_last, and checkpoint.*.
const std::vector<std::string>& bench_keys();

// The settings for `world` ranks: `base` is the config with `overrides` applied (the same list,
// to tell which keys the command line gave). Each is checked by resolving a copy: a micro-batch
// that does not divide a fixed per-rank batch is an Error naming --micro-batches; --decode on data
// that is not an image folder is an Error naming --decode.
SweepPlan plan_sweep(const Config& base, const std::vector<std::string>& overrides,
                     const SweepOptions& options, int world);

// One setting's figures over all ranks.
struct Row {
  int64_t micro_batch = 0;  // samples per forward/backward on one rank (auto: as measured)
  int64_t workers = 0;
  int64_t global_batch = 0;
  int64_t accum_steps = 0;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kOff;
  bool shard_optimizer = false;
  DecodeMode decode = DecodeMode::kCpu;
  bool fits = true;
  std::string note;  // why it does not fit ("out of memory at step 0 ...")
  int64_t timed_steps = 0;
  int64_t timed_samples = 0;  // global samples in the timed steps
  double timed_seconds = 0;   // the slowest rank's, between synchronized points
  double samples_per_s = 0;   // global: timed_samples / timed_seconds
  double tokens_per_s = 0;    // samples/s x tokens per sample; 0: not a sequence model
  double step_mean_s = 0;     // timed_seconds / timed_steps
  double step_p50_s = 0, step_p90_s = 0;  // of each step's host time; the largest over ranks
  double data_wait_share = 0;  // share of the timed seconds spent waiting for the loader (max)
  int64_t peak_memory = 0;     // bytes allocated at the peak on the fullest GPU; 0 on CPU
  int64_t memory_total = 0;    // the largest GPU's bytes (max over ranks); 0 on CPU
  std::optional<double> gpu_utilization;  // NVML percent, mean over ranks and the timed steps
  std::optional<double> mfu;  // model FLOP/s over peak FLOP/s, when both are known
};

struct SweepResult {
  std::string config;  // the config file
  int world = 1;
  std::string device;  // rank 0's: "cpu", "NVIDIA H200"
  int64_t tokens_per_sample = 0;
  GlobalBatch rule = GlobalBatch::kConfig;
  bool ladder = false;    // the table shows the rungs' columns
  bool decoders = false;  // the table shows the decode column
  int64_t warmup_steps = 0, steps = 0;
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
