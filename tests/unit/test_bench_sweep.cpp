// `dtrain bench --sweep section.key=v1,v2`: the lists it parses, each value read by the schema as
// the same key=value on the command line (an error names the key and the value), the keys it
// refuses (unknown, with the closest known one; one the run does not read; one the bench sets;
// one swept twice or given as an override too), the older options as its aliases (the same
// settings), the cross product in the sweeps' order, and a key of its own with a column named by
// it in the table, the CSV and the JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "bench/report.h"
#include "bench/sweep.h"
#include "dtrain/config.h"
#include "test_support.h"

namespace {

using dtrain::Config;
using dtrain::test::message_of;
namespace bench = dtrain::bench;

using dtrain::test::expect_all;

const char* kSweepYaml = R"(
run: {name: b, seed: 3, threads: 1}
model: {name: mlp, hidden: [8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 512, synthetic_features: 4,
       synthetic_classes: 3, workers: 1}
train: {epochs: 2, global_batch: 64, lr: 0.01}
)";

// `sweeps`: (option, text) pairs, "--sweep" or an alias.
bench::SweepPlan sweep_plan_of(const Config& base,
                               const std::vector<std::pair<std::string, std::string>>& sweeps,
                               const std::vector<std::string>& overrides = {}, int world = 1) {
  bench::SweepOptions o;
  o.warmup_steps = 3;
  o.steps = 7;
  for (const auto& [option, text] : sweeps)
    o.sweeps.push_back(option == "--sweep" ? bench::parse_sweep(text)
                                           : bench::parse_alias(option, text));
  return bench::plan_sweep(base, overrides, o, world);
}

std::string plan_error(const std::vector<std::pair<std::string, std::string>>& sweeps,
                       const std::vector<std::string>& overrides = {}) {
  const Config base = Config::from_string(kSweepYaml, "b.yaml", overrides);
  return message_of([&] { sweep_plan_of(base, sweeps, overrides); });
}

TEST(BenchKeys, ParsesAKeyAndItsValues) {
  const bench::KeySweep s = bench::parse_sweep("data.workers=0, 2,4");
  EXPECT_EQ(s.key, "data.workers");
  EXPECT_EQ(s.option, "--sweep");
  EXPECT_EQ(s.values, (std::vector<std::string>{"0", "2", "4"}));
  // A list value is written in brackets; its commas do not separate.
  EXPECT_EQ(bench::parse_sweep("model.hidden=[8,4],[16]").values,
            (std::vector<std::string>{"[8,4]", "[16]"}));
  expect_all(message_of([] { bench::parse_sweep("data.workers"); }),
             {"--sweep: needs section.key=v1,v2"});
  expect_all(message_of([] { bench::parse_sweep("=1,2"); }), {"--sweep: needs section.key=v1,v2"});
  expect_all(message_of([] { bench::parse_sweep("data.workers="); }),
             {"--sweep: needs a comma-separated list"});
  expect_all(message_of([] { bench::parse_sweep("data.workers=1,,2"); }),
             {"--sweep: an empty entry"});
  expect_all(message_of([] { bench::parse_sweep("data.workers=2,2"); }),
             {"--sweep: 2 is given twice"});
  // The aliases keep their whole-number checks.
  EXPECT_EQ(bench::parse_alias("--micro-batches", "8,16").values,
            (std::vector<std::string>{"8", "16"}));
  EXPECT_EQ(bench::parse_alias("--micro-batches", "8").key, "train.micro_batch");
  expect_all(message_of([] { bench::parse_alias("--micro-batches", "0,8"); }),
             {"--micro-batches: must be >= 1, got 0"});
}

TEST(BenchKeys, ValuesAreReadByTheSchemaAndErrorsNameTheKeyAndTheValue) {
  expect_all(plan_error({{"--sweep", "data.workers=2,-1"}}),
             {"data.workers: must be >= 0, got -1 (--sweep 'data.workers=2,-1')"});
  expect_all(plan_error({{"--sweep", "dist.bucket_cap_mb=25,abc"}}),
             {"dist.bucket_cap_mb: ", "'abc'"});
  expect_all(plan_error({{"--sweep", "dist.bucket_cap_mb=0"}}),
             {"dist.bucket_cap_mb: ", "(--sweep 'dist.bucket_cap_mb=0')"});
  // A value that reads as the command line reads it: 1e1 is a number, "auto" the micro-batch's
  // word.
  const Config base = Config::from_string(kSweepYaml, "b.yaml");
  EXPECT_EQ(sweep_plan_of(base, {{"--sweep", "dist.bucket_cap_mb=1e1"}})
                .settings[0]
                .config.dist.bucket_cap_mb,
            10.0);
  EXPECT_EQ(sweep_plan_of(base, {{"--sweep", "train.micro_batch=auto"}}, {"train.global_batch=64"})
                .settings[0]
                .micro_batch,
            -1);
}

TEST(BenchKeys, RefusesUnknownInapplicableAndBenchSetKeys) {
  expect_all(
      plan_error({{"--sweep", "data.worker=1,2"}}),
      {"data.worker: unknown key (--sweep 'data.worker=1,2'); did you mean 'data.workers'?"});
  expect_all(plan_error({{"--sweep", "data=1"}}), {"'data' is a section"});
  // The schema's applicability: an image folder's key on synthetic data, a key mlp does not read.
  expect_all(plan_error({{"--sweep", "data.image_size=64,128"}}),
             {"--sweep: data.image_size does not apply to this run (data.format is synthetic)"});
  expect_all(plan_error({{"--sweep", "model.seq_len=64,128"}}),
             {"--sweep: model.seq_len does not apply to this run (model.name is mlp)"});
  // Keys the bench sets.
  for (const std::string key : {"run.dir", "train.max_steps", "checkpoint.resume"})
    expect_all(plan_error({{"--sweep", key + "=a,b"}}),
               {key + ": dtrain bench sets this key", "it cannot be swept"});
  // Twice, or on the command line too.
  expect_all(plan_error({{"--workers", "0,2"}, {"--sweep", "data.workers=1"}}),
             {"data.workers: is swept by --workers and by --sweep; give one list"});
  expect_all(
      plan_error({{"--sweep", "dist.bucket_cap_mb=1,2"}}, {"dist.bucket_cap_mb=5"}),
      {"dist.bucket_cap_mb: is given on the command line and swept by --sweep; give one of them"});
  // A micro-batch sweep that sets global batch = micro-batch x world needs sizes.
  expect_all(plan_error({{"--sweep", "train.micro_batch=8,auto"}}),
             {"--sweep: global batch = micro-batch x ranks needs a size >= 1, got auto"});
}

TEST(BenchKeys, TheOlderOptionsAreAliasesGivingTheSameSettings) {
  const Config base =
      Config::from_string(kSweepYaml, "b.yaml", {"data.format=image_folder", "data.path=/imgs"});
  const bench::SweepPlan a = sweep_plan_of(base,
                                           {{"--micro-batches", "8,16"},
                                            {"--workers", "0,2"},
                                            {"--activation-checkpointing", "off,blocks"},
                                            {"--shard-optimizer", "false,true"},
                                            {"--decode", "cpu,gpu"}},
                                           {}, 2);
  const bench::SweepPlan b =
      sweep_plan_of(base,
                    {{"--sweep", "train.micro_batch=8,16"},
                     {"--sweep", "data.workers=0,2"},
                     {"--sweep", "train.activation_checkpointing=off,blocks"},
                     {"--sweep", "dist.shard_optimizer=false,true"},
                     {"--sweep", "data.decode=cpu,gpu"}},
                    {}, 2);
  EXPECT_EQ(a.rule, bench::GlobalBatch::kMicroTimesWorld);
  EXPECT_EQ(b.rule, a.rule);
  EXPECT_TRUE(a.ladder && b.ladder && a.decoders && b.decoders);
  EXPECT_TRUE(a.keys.empty() && b.keys.empty());  // every one has its own column
  ASSERT_EQ(a.settings.size(), 32u);
  ASSERT_EQ(b.settings.size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    const bench::Setting &x = a.settings[i], &y = b.settings[i];
    EXPECT_EQ(x.values, y.values) << i;
    EXPECT_EQ(x.micro_batch, y.micro_batch) << i;
    EXPECT_EQ(x.workers, y.workers) << i;
    EXPECT_EQ(x.global_batch, y.global_batch) << i;
    EXPECT_EQ(x.accum_steps, y.accum_steps) << i;
    EXPECT_EQ(x.config.dump(), y.config.dump()) << i;
  }
  // SweepOptions::micro_batches is --micro-batches.
  bench::SweepOptions o;
  o.micro_batches = {8, 16};
  o.warmup_steps = 3, o.steps = 7;  // as sweep_plan_of()
  o.sweeps = {bench::parse_alias("--workers", "0,2")};
  const bench::SweepPlan c = bench::plan_sweep(base, {}, o, 2);
  const bench::SweepPlan d =
      sweep_plan_of(base, {{"--micro-batches", "8,16"}, {"--workers", "0,2"}}, {}, 2);
  ASSERT_EQ(c.settings.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(c.settings[i].config.dump(), d.settings[i].config.dump()) << i;
  // The first sweep outermost, the last innermost: setting 1 differs from 0 by the decoder,
  // setting 16 by the micro-batch.
  EXPECT_EQ(a.settings[1].values.back(),
            (std::pair<std::string, std::string>{"data.decode", "gpu"}));
  EXPECT_EQ(a.settings[16].micro_batch, 16);
  EXPECT_EQ(a.settings[16].global_batch, 32);
}

TEST(BenchKeys, AnotherKeyIsCrossedAndHasAColumnNamedByIt) {
  const Config base = Config::from_string(kSweepYaml, "b.yaml");
  const bench::SweepPlan plan = sweep_plan_of(base, {{"--workers", "0,2"},
                                                     {"--sweep", "dist.bucket_cap_mb=25,0.5"},
                                                     {"--sweep", "train.lr=0.1,0.2"}});
  EXPECT_EQ(plan.rule, bench::GlobalBatch::kConfig);
  EXPECT_EQ(plan.keys, (std::vector<std::string>{"dist.bucket_cap_mb", "train.lr"}));
  ASSERT_EQ(plan.settings.size(), 8u);
  const double caps[] = {25, 25, 0.5, 0.5};
  for (size_t i = 0; i < 8; ++i) {
    const bench::Setting& s = plan.settings[i];
    EXPECT_EQ(s.workers, i < 4 ? 0 : 2) << i;
    EXPECT_EQ(s.config.dist.bucket_cap_mb, caps[i % 4]) << i;
    EXPECT_EQ(s.config.train.lr, i % 2 == 0 ? 0.1 : 0.2) << i;
    ASSERT_EQ(s.values.size(), 3u);
    EXPECT_EQ(s.values[1].first, "dist.bucket_cap_mb");
  }
  EXPECT_EQ(plan.settings[2].values[1].second, "0.5");
  // train.global_batch swept: the rule says so.
  EXPECT_EQ(sweep_plan_of(base, {{"--sweep", "train.global_batch=32,64"}}).rule,
            bench::GlobalBatch::kSwept);

  bench::SweepResult res;
  res.keys = plan.keys;
  bench::Row r;
  r.micro_batch = 64, r.workers = 0, r.global_batch = 64, r.accum_steps = 1, r.samples_per_s = 100,
  r.timed_steps = 7;
  r.keys = {{"dist.bucket_cap_mb", "0.5"}, {"train.lr", "0.2"}};
  res.rows = {r};
  const bench::Recommendation rec = bench::recommend(res.rows);
  expect_all(bench::table_text(res, rec), {"dist.bucket_cap_mb", "train.lr", " 0.5 ", " 0.2 "});
  expect_all(bench::csv_text(res, rec),
             {",decode,dist.bucket_cap_mb,train.lr\n", ",cpu,0.5,0.2\n"});
  const auto j = nlohmann::json::parse(bench::json_text(res, rec));
  EXPECT_EQ(j["rows"][0]["dist.bucket_cap_mb"], 0.5);
  EXPECT_EQ(j["recommended"]["train.lr"], 0.2);
  expect_all(rec.text, {"dist.bucket_cap_mb=0.5, train.lr=0.2"});
}

}  // namespace
