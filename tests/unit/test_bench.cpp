// `dtrain bench`'s logic without running anything: the size lists, the settings a sweep runs
// (global batch = micro-batch x world, or fixed), the keys it refuses on the command line (the
// options below are --sweep's aliases; test_bench_sweep.cpp holds --sweep itself), the
// nearest-rank percentile, the recommendation (fastest with headroom, smaller within 3%), the
// rungs of the memory ladder (--activation-checkpointing, --shard-optimizer), the image decoders
// (--decode), the CSV and JSON, and never writing over an existing output. Expected values come
// from the rules' formulas, worked out by hand in each test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/step_timer.h"
#include "bench/sweep.h"
#include "dtrain/config.h"
#include "test_support.h"

namespace {

using dtrain::Config;
using dtrain::test::message_of;
namespace bench = dtrain::bench;

using dtrain::test::expect_all;

TEST(BenchSizes, ParsesAList) {
  EXPECT_EQ(bench::parse_sizes("32,64,128", "--micro-batches", 1),
            (std::vector<int64_t>{32, 64, 128}));
  EXPECT_EQ(bench::parse_sizes(" 8, 16 ", "--micro-batches", 1), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(bench::parse_sizes("0,2", "--workers", 0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(bench::parse_sizes("7", "--workers", 0), (std::vector<int64_t>{7}));
}

TEST(BenchSizes, BadListsNameTheOptionAndTheEntry) {
  auto err = [](const std::string& text, int64_t min) {
    return message_of([&] { bench::parse_sizes(text, "--micro-batches", min); });
  };
  expect_all(err("0,abc", 1), {"--micro-batches: ", "must be >= 1, got 0", "(in '0,abc')"});
  expect_all(err("8,abc", 1), {"--micro-batches: ", "'abc' is not a whole number"});
  expect_all(err("8,,16", 1), {"--micro-batches: ", "an empty entry", "'8,,16'"});
  expect_all(err("8,", 1), {"an empty entry"});
  expect_all(err("8,8", 1), {"8 is given twice"});
  expect_all(err("", 1), {"--micro-batches: ", "needs a comma-separated list"});
  expect_all(err("1e3", 1), {"'1e3' is not a whole number"});
  expect_all(err("4.5", 1), {"'4.5' is not a whole number"});
  expect_all(err("99999999999999999999", 1), {"is too large"});
  expect_all(err("-1", 0), {"must be >= 0, got -1"});
}

const char* kYaml = R"(
run: {name: b, seed: 3, threads: 1}
model: {name: mlp, hidden: [8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 512, synthetic_features: 4,
       synthetic_classes: 3, workers: 1}
train: {epochs: 2, global_batch: 64, lr: 0.01}
checkpoint: {every_steps: 10}
)";

std::string list(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

bench::SweepOptions options(std::vector<int64_t> micro, std::vector<int64_t> workers) {
  bench::SweepOptions o;
  if (!micro.empty()) o.sweeps.push_back(bench::parse_alias("--micro-batches", list(micro)));
  if (!workers.empty()) o.sweeps.push_back(bench::parse_alias("--workers", list(workers)));
  o.warmup_steps = 3;
  o.steps = 7;
  return o;
}

TEST(BenchLadder, TheRungsAreCrossedWithTheSizesAndNamedInTheOutputs) {
  using dtrain::ActivationCheckpointing;
  const Config base = Config::from_string(kYaml, "b.yaml");
  bench::SweepOptions o = options({8, 16}, {});
  o.sweeps.push_back(bench::parse_alias("--activation-checkpointing", "off, blocks"));
  o.sweeps.push_back(bench::parse_alias("--shard-optimizer", "false,true"));
  const bench::SweepPlan plan = bench::plan_sweep(base, {}, o, 2);
  EXPECT_TRUE(plan.ladder);
  ASSERT_EQ(plan.settings.size(), 8u);  // 2 sizes x 2 checkpointing x 2 sharding
  for (size_t i = 0; i < 8; ++i) {
    const bench::Setting& s = plan.settings[i];
    EXPECT_EQ(s.micro_batch, i < 4 ? 8 : 16);
    const bool blocks = (i / 2) % 2 == 1, shard = i % 2 == 1;
    EXPECT_EQ(s.config.train.activation_checkpointing == ActivationCheckpointing::kBlocks, blocks)
        << i;
    EXPECT_EQ(s.config.dist.shard_optimizer != dtrain::ShardOptimizer::kOff, shard) << i;
  }
  bench::SweepResult res;
  res.ladder = plan.ladder;
  bench::Row r;
  r.micro_batch = 8, r.global_batch = 16, r.accum_steps = 1, r.samples_per_s = 100,
  r.timed_steps = 7;
  r.checkpointing = ActivationCheckpointing::kBlocks,
  r.shard_optimizer = dtrain::ShardOptimizer::kState;
  res.rows = {r};
  const bench::Recommendation rec = bench::recommend(res.rows);
  const std::string table = bench::table_text(res, rec);
  expect_all(table, {"ckpt", "sharded", "blocks", "yes"});
  const std::string csv = bench::csv_text(res, rec);
  expect_all(csv, {",activation_checkpointing,shard_optimizer,decode\n", ",blocks,true,cpu\n"});
  const auto j = nlohmann::json::parse(bench::json_text(res, rec));
  EXPECT_EQ(j["rows"][0]["activation_checkpointing"], "blocks");
  EXPECT_EQ(j["rows"][0]["shard_optimizer"], true);
  EXPECT_EQ(j["recommended"]["shard_optimizer"], true);
  expect_all(rec.text, {"train.activation_checkpointing=blocks", "dist.shard_optimizer=true"});
}

// Plans `sweeps` (aliases "--workers=0,2", or "--sweep" entries "data.workers=0,2") on `base`.
bench::SweepPlan plan_of(const Config& base,
                         const std::vector<std::pair<std::string, std::string>>& sweeps,
                         const std::vector<std::string>& overrides = {}, int world = 1) {
  bench::SweepOptions o = options({}, {});
  for (const auto& [option, text] : sweeps)
    o.sweeps.push_back(option == "--sweep" ? bench::parse_sweep(text)
                                           : bench::parse_alias(option, text));
  return bench::plan_sweep(base, overrides, o, world);
}

TEST(BenchLadder, BadRungsAndKeysGivenTwiceAreNamed) {
  const Config plain = Config::from_string(kYaml, "b.yaml");
  expect_all(message_of([&] {
               plan_of(plain, {{"--activation-checkpointing", "off,on"}});
             }),
             {"train.activation_checkpointing: must be one of off | blocks, got 'on'",
              "(--activation-checkpointing 'off,on')"});
  expect_all(message_of([] { bench::parse_alias("--shard-optimizer", "true,true"); }),
             {"--shard-optimizer: ", "true is given twice"});
  expect_all(message_of([&] {
               plan_of(plain, {{"--shard-optimizer", "maybe"}});
             }),
             {"dist.shard_optimizer: must be one of false | true | gradients, got 'maybe'"});
  const Config base = Config::from_string(kYaml, "b.yaml", {"train.activation_checkpointing=off"});
  bench::SweepOptions o = options({}, {});
  o.sweeps = {bench::parse_alias("--activation-checkpointing", "off")};
  expect_all(
      message_of([&] { bench::plan_sweep(base, {"train.activation_checkpointing=off"}, o, 1); }),
      {"train.activation_checkpointing: ", "swept by --activation-checkpointing"});
  o.sweeps = {bench::parse_alias("--shard-optimizer", "true")};
  expect_all(message_of([&] { bench::plan_sweep(base, {"dist.shard_optimizer=true"}, o, 1); }),
             {"dist.shard_optimizer: ", "swept by --shard-optimizer"});
}

TEST(BenchDecode, TheDecodersAreCrossedWithTheWorkersAndNamedInTheOutputs) {
  using dtrain::DecodeMode;
  const Config base =
      Config::from_string(kYaml, "b.yaml", {"data.format=image_folder", "data.path=/imgs"});
  bench::SweepOptions o = options({}, {2, 4});
  o.sweeps.push_back(bench::parse_alias("--decode", "gpu, cpu"));
  const bench::SweepPlan plan = bench::plan_sweep(base, {}, o, 1);
  EXPECT_TRUE(plan.decoders);
  EXPECT_FALSE(plan.ladder);
  ASSERT_EQ(plan.settings.size(), 4u);  // 2 worker counts x 2 decoders, decoders innermost
  const int64_t workers[] = {2, 2, 4, 4};
  const DecodeMode decode[] = {DecodeMode::kGpu, DecodeMode::kCpu, DecodeMode::kGpu,
                               DecodeMode::kCpu};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(plan.settings[i].workers, workers[i]) << i;
    EXPECT_EQ(plan.settings[i].config.data.decode, decode[i]) << i;
  }
  bench::SweepResult res;
  res.decoders = plan.decoders;
  bench::Row r;
  r.micro_batch = 32, r.workers = 2, r.global_batch = 64, r.accum_steps = 2, r.samples_per_s = 100,
  r.timed_steps = 7;
  r.decode = DecodeMode::kGpu;
  res.rows = {r};
  const bench::Recommendation rec = bench::recommend(res.rows);
  expect_all(bench::table_text(res, rec), {"decode", " gpu "});
  expect_all(bench::csv_text(res, rec), {",shard_optimizer,decode\n", ",off,false,gpu\n"});
  const auto j = nlohmann::json::parse(bench::json_text(res, rec));
  EXPECT_EQ(j["rows"][0]["decode"], "gpu");
  EXPECT_EQ(j["recommended"]["decode"], "gpu");
  expect_all(rec.text, {"data.decode=gpu"});
}

TEST(BenchDecode, BadDecodersKeysGivenTwiceAndOtherFormatsAreNamed) {
  const Config images = Config::from_string(
      kYaml, "b.yaml", {"data.format=image_folder", "data.path=/imgs", "data.decode=cpu"});
  expect_all(
      message_of([&] {
        plan_of(images, {{"--decode", "cpu,nvjpeg"}});
      }),
      {"data.decode: must be one of cpu | gpu | auto, got 'nvjpeg' (--decode 'cpu,nvjpeg')"});
  expect_all(message_of([] { bench::parse_alias("--decode", "gpu,gpu"); }),
             {"--decode: ", "gpu is given twice"});
  bench::SweepOptions o = options({}, {});
  o.sweeps = {bench::parse_alias("--decode", "gpu")};
  expect_all(message_of([&] { bench::plan_sweep(images, {"data.decode=cpu"}, o, 1); }),
             {"data.decode: ", "swept by --decode"});
  const Config synthetic = Config::from_string(kYaml, "b.yaml");
  expect_all(message_of([&] { bench::plan_sweep(synthetic, {}, o, 1); }),
             {"--decode: data.decode does not apply to this run (data.format is synthetic)"});
}

TEST(BenchPlan, MicroBatchTimesWorldCrossWorkers) {
  const Config base = Config::from_string(kYaml, "b.yaml");
  const bench::SweepPlan plan = bench::plan_sweep(base, {}, options({8, 16}, {0, 2}), 2);
  EXPECT_EQ(plan.rule, bench::GlobalBatch::kMicroTimesWorld);
  ASSERT_EQ(plan.settings.size(), 4u);
  const int64_t micro[] = {8, 8, 16, 16}, workers[] = {0, 2, 0, 2};
  for (size_t i = 0; i < 4; ++i) {
    const bench::Setting& s = plan.settings[i];
    EXPECT_EQ(s.micro_batch, micro[i]);
    EXPECT_EQ(s.workers, workers[i]);
    EXPECT_EQ(s.global_batch, micro[i] * 2);  // micro x world
    EXPECT_EQ(s.rank_batch, micro[i]);
    EXPECT_EQ(s.accum_steps, 1);
    const Config& c = s.config;
    EXPECT_FALSE(c.is_resolved());
    EXPECT_EQ(c.train.global_batch, micro[i] * 2);
    EXPECT_EQ(c.train.micro_batch, micro[i]);
    EXPECT_EQ(c.data.workers, workers[i]);
    EXPECT_EQ(c.run.dir, "");
    EXPECT_EQ(c.run.run_dir(), "");
    EXPECT_EQ(c.checkpoint.resume, "none");
    EXPECT_EQ(c.checkpoint.folder(c.run), "");
    EXPECT_EQ(c.checkpoint.every_steps, 0);
    EXPECT_FALSE(c.checkpoint.every_epoch);
    EXPECT_FALSE(c.train.eval);
    EXPECT_TRUE(c.train.drop_last);
    EXPECT_EQ(c.train.max_steps, 3 + 7);
    EXPECT_GE(c.train.epochs, 3 + 7);
    EXPECT_EQ(c.run.profile_steps, 0);
    EXPECT_EQ(c.run.seed, 3);  // the same seed: every setting starts from the same model
  }
}

TEST(BenchPlan, GlobalBatchOnTheCommandLineStaysFixed) {
  const std::vector<std::string> ov = {"train.global_batch=96"};
  const Config base = Config::from_string(kYaml, "b.yaml", ov);
  const bench::SweepPlan plan = bench::plan_sweep(base, ov, options({8, 16, 48}, {}), 2);
  EXPECT_EQ(plan.rule, bench::GlobalBatch::kFixed);
  ASSERT_EQ(plan.settings.size(), 3u);
  const int64_t accum[] = {48 / 8, 48 / 16, 48 / 48};  // rank batch 96 / 2 = 48
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.settings[i].global_batch, 96);
    EXPECT_EQ(plan.settings[i].rank_batch, 48);
    EXPECT_EQ(plan.settings[i].accum_steps, accum[i]);
    EXPECT_EQ(plan.settings[i].workers, 1);  // the config's
  }
  // 20 does not divide the per-rank batch 48.
  expect_all(message_of([&] {
               bench::plan_sweep(base, ov, options({8, 20}, {}), 2);
             }),
             {"--micro-batches: micro-batch 20 on 2 rank(s): ", "train.micro_batch"});
}

TEST(BenchPlan, KeepsTheConfigsGlobalBatchAndLearningRate) {
  const Config base = Config::from_string(kYaml, "b.yaml");
  const bench::SweepPlan plan = bench::plan_sweep(base, {}, options({8}, {}), 2);
  EXPECT_EQ(plan.settings[0].global_batch, 16);  // micro x world, not the config's 64
  EXPECT_EQ(plan.config_global_batch, 64);
  EXPECT_EQ(plan.config_lr, 0.01);
}

TEST(BenchPlan, NoSweepIsTheConfigAsItIs) {
  const Config base = Config::from_string(kYaml, "b.yaml");
  const bench::SweepPlan plan = bench::plan_sweep(base, {}, options({}, {}), 4);
  EXPECT_EQ(plan.rule, bench::GlobalBatch::kConfig);
  ASSERT_EQ(plan.settings.size(), 1u);
  EXPECT_EQ(plan.settings[0].global_batch, 64);
  EXPECT_EQ(plan.settings[0].rank_batch, 16);
  EXPECT_EQ(plan.settings[0].workers, 1);
}

TEST(BenchPlan, RefusesKeysItSetsAndConflicts) {
  for (const std::string ov : {"run.dir=x", "train.max_steps=100", "train.epochs=3",
                               "checkpoint.resume=auto", "train.eval=true"}) {
    const std::string key = ov.substr(0, ov.find('='));
    const Config base = Config::from_string(kYaml, "b.yaml", {ov});
    expect_all(message_of([&] { bench::plan_sweep(base, {ov}, options({8}, {}), 1); }),
               {key + ": dtrain bench sets this key"});
  }
  {
    const Config base = Config::from_string(kYaml, "b.yaml", {"train.micro_batch=8"});
    expect_all(
        message_of([&] { bench::plan_sweep(base, {"train.micro_batch=8"}, options({8}, {}), 1); }),
        {"train.micro_batch: ", "--micro-batches"});
    // Without a micro-batch sweep the override is the config's micro-batch.
    EXPECT_EQ(bench::plan_sweep(base, {"train.micro_batch=8"}, options({}, {0}), 1)
                  .settings[0]
                  .accum_steps,
              8);
  }
  const Config w = Config::from_string(kYaml, "b.yaml", {"data.workers=2"});
  expect_all(message_of([&] {
               bench::plan_sweep(w, {"data.workers=2"}, options({}, {0, 1}), 1);
             }),
             {"data.workers: ", "--workers"});
  const Config base = Config::from_string(kYaml, "b.yaml");
  bench::SweepOptions o = options({8}, {});
  o.steps = 0;
  expect_all(message_of([&] { bench::plan_sweep(base, {}, o, 1); }), {"--steps: "});
  o.steps = 1, o.warmup_steps = -1;
  expect_all(message_of([&] { bench::plan_sweep(base, {}, o, 1); }), {"--warmup-steps: "});
}

TEST(BenchPercentile, NearestRank) {
  // Nearest rank: the ceil(p * n)-th smallest value.
  EXPECT_EQ(bench::percentile({5, 1, 4, 2, 3}, 0.5), 3);                  // ceil(2.5) = 3rd
  EXPECT_EQ(bench::percentile({5, 1, 4, 2, 3}, 0.9), 5);                  // ceil(4.5) = 5th
  EXPECT_EQ(bench::percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9), 9);  // 9th
  EXPECT_EQ(bench::percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5), 5);  // 5th
  EXPECT_EQ(bench::percentile({7}, 0.5), 7);
  EXPECT_EQ(bench::percentile({}, 0.5), 0);
}

bench::Row row(int64_t micro, int64_t workers, double rate, int64_t peak = 0, int64_t total = 0) {
  bench::Row r;
  r.micro_batch = micro;
  r.workers = workers;
  r.global_batch = micro;
  r.accum_steps = 1;
  r.samples_per_s = rate;
  r.peak_memory = peak;
  r.memory_total = total;
  return r;
}

TEST(BenchRecommend, SmallestWithinThreePercentOfTheFastest) {
  // Fastest 186; 3% below it is 180.42: 185 (32) is in, 180 (16) is not.
  const std::vector<bench::Row> rows = {row(8, 1, 100), row(16, 1, 180), row(32, 1, 185),
                                        row(64, 1, 186)};
  const bench::Recommendation rec = bench::recommend(rows);
  EXPECT_EQ(rec.fastest, 3);
  EXPECT_EQ(rec.row, 2);
  expect_all(rec.text, {"recommended: micro-batch 32, data.workers 1 (185.0 samples/s)",
                        "within 3% of the fastest, micro-batch 64",
                        "with a smaller micro-batch: diminishing returns"});
  // The fastest alone when nothing else is close.
  const std::vector<bench::Row> far = {row(8, 1, 100), row(16, 1, 150)};
  EXPECT_EQ(bench::recommend(far).row, 1);
  expect_all(bench::recommend(far).text,
             {"micro-batch 16, data.workers 1, the fastest (150.0 samples/s)"});
}

TEST(BenchRecommend, HeadroomAndWhatDoesNotFit) {
  const int64_t gib = int64_t{1} << 30;
  std::vector<bench::Row> rows = {row(32, 2, 300, 40 * gib, 80 * gib),
                                  row(64, 2, 400, 71 * gib, 80 * gib),
                                  row(128, 2, 410, 75 * gib, 80 * gib), row(256, 2, 0)};
  rows[3].fits = false;
  rows[3].note = "does not fit: out of memory at step 0 (on some rank)";
  // 128 leaves 5 of 80 GiB free (< 10%): not eligible; 64 leaves 9 of 80 GiB (11.25%): eligible.
  const bench::Recommendation rec = bench::recommend(rows);
  EXPECT_EQ(rec.fastest, 1);
  EXPECT_EQ(rec.row, 1);
  EXPECT_EQ(rec.crowded, std::vector<int>{2});
  expect_all(rec.text, {"micro-batch 64, data.workers 2, the fastest (400.0 samples/s)",
                        "leaves 11% of the GPU's memory free",
                        "micro-batch 128, data.workers 2 fits but leaves less than 10%"});
  std::vector<bench::Row> none = {rows[3]};
  EXPECT_EQ(bench::recommend(none).row, -1);
  expect_all(bench::recommend(none).text, {"no recommendation: no setting fits"});
}

TEST(BenchRecommend, FewestWorkersAmongEquals) {
  // 102.5 is the fastest; 3% below is 99.425: all three are in; same micro-batch: fewest workers.
  const std::vector<bench::Row> rows = {row(16, 4, 102.5), row(16, 0, 100), row(16, 2, 102)};
  EXPECT_EQ(bench::recommend(rows).row, 1);
  expect_all(bench::recommend(rows).text, {"with fewer loader workers"});
}

bench::SweepResult result() {
  bench::SweepResult res;
  res.config = "configs/x.yaml";
  res.world = 2;
  res.device = "cpu";
  res.rule = bench::GlobalBatch::kMicroTimesWorld;
  res.warmup_steps = 5;
  res.steps = 20;
  bench::Row a = row(8, 1, 250);
  a.global_batch = 16;
  a.timed_steps = 20;
  a.timed_samples = 320;
  a.timed_seconds = 1.28;
  a.step_mean_s = 0.064, a.step_p50_s = 0.06, a.step_p90_s = 0.07, a.data_wait_share = 0.25;
  bench::Row b = row(1 << 20, 1, 0);
  b.global_batch = 2 << 20;
  b.fits = false;
  b.note = "does not fit: out of memory, \"x\"";
  res.rows = {a, b};
  return res;
}

TEST(BenchOutput, CsvAndJsonHoldEveryRow) {
  const bench::SweepResult res = result();
  const bench::Recommendation rec = bench::recommend(res.rows);
  const std::string csv = bench::csv_text(res, rec);
  std::vector<std::string> lines;
  for (size_t b = 0, e; b < csv.size(); b = e + 1)
    lines.push_back(csv.substr(b, (e = csv.find('\n', b)) - b));
  ASSERT_EQ(lines.size(), 3u);
  auto fields = [](const std::string& l) {
    size_t n = 1;
    bool quoted = false;
    for (char c : l) quoted = c == '"' ? !quoted : quoted, n += !quoted && c == ',';
    return n;
  };
  EXPECT_EQ(fields(lines[0]), 20u);  // ... activation_checkpointing, shard_optimizer, decode
  EXPECT_EQ(fields(lines[1]), 20u);
  EXPECT_EQ(fields(lines[2]), 20u);
  EXPECT_EQ(lines[1].rfind("8,1,16,1,true,250,", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find(",true,"), std::string::npos);  // recommended
  EXPECT_EQ(lines[2].rfind("1048576,1,2097152,1,false,", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find("\"does not fit: out of memory, \"\"x\"\"\""), std::string::npos)
      << lines[2];

  const nlohmann::json j = nlohmann::json::parse(bench::json_text(res, rec));
  EXPECT_EQ(j["world"], 2);
  EXPECT_EQ(j["global_batch_rule"], "micro_batch_x_world");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["samples_per_s"], 250.0);
  EXPECT_EQ(j["rows"][0]["timed_samples"], 320);
  EXPECT_TRUE(j["rows"][0]["tokens_per_s"].is_null());       // not a sequence model
  EXPECT_TRUE(j["rows"][0]["peak_memory_bytes"].is_null());  // CPU
  EXPECT_FALSE(j["rows"][1]["fits"]);
  EXPECT_TRUE(j["rows"][1]["samples_per_s"].is_null());
  EXPECT_EQ(j["recommended"]["micro_batch"], 8);

  const std::string table = bench::table_text(res, rec);
  expect_all(table,
             {"configs/x.yaml on 2 rank(s), cpu; 5 warm-up and 20 timed steps",
              "global batch = micro-batch x 2 rank(s)", "250.0", "64.00", "25.0%", "<- recommended",
              "does not fit: out of memory", "recommended: micro-batch 8"});
}

// Issue 54, point 2: a recommendation whose global batch is not the config's says so, old ->
// new, and that it changes the recipe (the learning rate scaled with it: 0.01 x 16 / 64).
TEST(BenchOutput, SaysWhenTheRecommendationChangesTheGlobalBatch) {
  bench::SweepResult res = result();
  res.config_global_batch = 64, res.config_lr = 0.01;
  const bench::Recommendation rec = bench::recommend(res.rows);
  const std::string change = bench::global_batch_change(res, rec);
  EXPECT_EQ(change,
            "the recommended setting changes train.global_batch 64 -> 16 (micro-batch 8 x 1 "
            "accumulation step(s) x 2 rank(s)): that changes the training recipe, not only its "
            "speed; scale train.lr with it (the linear scaling rule: train.lr 0.01 -> 0.0025) and "
            "compare the loss curves, or keep the config's batch: train.global_batch=64 on the "
            "bench's command line times each micro-batch at it");
  EXPECT_NE(bench::table_text(res, rec).find("recommended: micro-batch 8, data.workers 1, the "
                                             "fastest (250.0 samples/s)\n" +
                                             change + "\n"),
            std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(bench::json_text(res, rec));
  EXPECT_EQ(j["global_batch_change"], change);
  EXPECT_EQ(j["config_global_batch"], 64);
  EXPECT_EQ(j["recommended"]["global_batch"], 16);
  // The config's own batch: nothing to say.
  res.config_global_batch = 16;
  EXPECT_EQ(bench::global_batch_change(res, rec), "");
  EXPECT_EQ(bench::table_text(res, rec).find("changes train.global_batch"), std::string::npos);
}

TEST(BenchOutput, NeverWritesOverAnExistingFile) {
  dtrain::test::TempDir dir;
  const std::string prefix = dir.path() + "/b";
  const bench::SweepResult res = result();
  const bench::Recommendation rec = bench::recommend(res.rows);
  bench::check_outputs(prefix, false);
  bench::write_outputs(prefix, false, res, rec);
  const std::string json = dtrain::test::read_text(prefix + ".json");
  EXPECT_FALSE(json.empty());
  expect_all(message_of([&] { bench::write_outputs(prefix, false, res, rec); }),
             {prefix + ".csv: exists", "--force"});
  bench::SweepResult other = res;
  other.world = 7;
  EXPECT_EQ(dtrain::test::read_text(prefix + ".json"), json);
  bench::write_outputs(prefix, true, other, rec);  // --force
  EXPECT_NE(dtrain::test::read_text(prefix + ".json"), json);
  expect_all(message_of([&] { bench::check_outputs(dir.path() + "/missing/b", false); }),
             {"--out: ", "does not exist"});
  expect_all(message_of([&] { bench::check_outputs(dir.path() + "/", false); }), {"--out: "});
}

}  // namespace
