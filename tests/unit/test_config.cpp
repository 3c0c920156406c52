// Config: parsing, overrides, errors that name the key and line, batch arithmetic, hash.
#include <gtest/gtest.h>

#include <fstream>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "test_paths.h"

namespace dtrain {
namespace {

// The Error thrown by `f`, or a failed expectation when none is thrown.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no dtrain::Error was thrown";
  return {};
}

TEST(Config, DefaultsOfADefaultConfig) {
  Config c;
  EXPECT_EQ(c.train.global_batch, 256);
  EXPECT_EQ(c.model.name, "cnn");
  EXPECT_EQ(c.train.precision, Precision::kFp32);
}

TEST(Config, ParsesEveryType) {
  Config c = Config::from_string(R"(
run: {name: x, seed: 7, quiet: true}
model: {name: mlp, hidden: [64, 32], dropout: 0.25}
train: {lr: 3e-4, global_batch: 64, micro_batch: auto, precision: bf16}
dist: {bucket_cap_mb: 12.5}
)");
  EXPECT_EQ(c.run.name, "x");
  EXPECT_EQ(c.run.seed, 7);
  EXPECT_TRUE(c.run.quiet);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{64, 32}));
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.25);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.micro_batch, -1);
  EXPECT_EQ(c.train.precision, Precision::kBf16);
  EXPECT_DOUBLE_EQ(c.dist.bucket_cap_mb, 12.5);
}

TEST(Config, OverridesUseTheSameKeysAndWinOverTheFile) {
  Config c = Config::from_string("train: {lr: 0.1}\n", "f.yaml",
                                 {"train.lr=0.5", "model.hidden=8,4", "run.name=abc"});
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(c.run.name, "abc");
  EXPECT_NE(c.origin_of("train.lr").find("command line"), std::string::npos);
}

TEST(Config, UnknownKeyNamesKeyLineAndSuggestion) {
  std::string msg =
      error_of([] { Config::from_string("train:\n  epochs: 1\n  lrr: 0.1\n", "x.yaml"); });
  EXPECT_NE(msg.find("train.lrr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x.yaml:3:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'train.lr'"), std::string::npos) << msg;
}

TEST(Config, UnknownSectionIsAnError) {
  std::string msg = error_of([] { Config::from_string("trian:\n  lr: 0.1\n", "x.yaml"); });
  EXPECT_NE(msg.find("unknown section 'trian'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x.yaml:1:1"), std::string::npos) << msg;
}

TEST(Config, WrongTypeNamesKeyAndLine) {
  std::string msg =
      error_of([] { Config::from_string("run: {}\ntrain:\n  lr: fast\n", "y.yaml"); });
  EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("y.yaml:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fast'"), std::string::npos) << msg;
  msg = error_of([] { Config::from_string("train: {global_batch: 12.5}\n"); });
  EXPECT_NE(msg.find("train.global_batch"), std::string::npos) << msg;
  msg = error_of([] { Config::from_string("train: {eval: maybe}\n"); });
  EXPECT_NE(msg.find("true or false"), std::string::npos) << msg;
  msg = error_of([] { Config::from_string("train: {precision: fp8}\n"); });
  EXPECT_NE(msg.find("fp32 | bf16 | fp16"), std::string::npos) << msg;
}

TEST(Config, ImpossibleValuesAreErrors) {
  EXPECT_NE(error_of([] { Config::from_string("train: {lr: -1}\n"); }).find("must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { Config::from_string("train: {global_batch: 0}\n"); }).find(">= 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { Config::from_string("model: {dropout: 1.0}\n"); }).find("model.dropout"),
            std::string::npos);
  EXPECT_NE(error_of([] { Config::from_string("model: {hidden: [4, 0]}\n"); }).find("> 0"),
            std::string::npos);
}

TEST(Config, MalformedYamlNamesFileAndLine) {
  std::string msg =
      error_of([] { Config::from_string("train:\n  lr: [0.1\n  epochs: 2\n", "bad.yaml"); });
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.yaml:"), std::string::npos) << msg;
}

TEST(Config, MissingFileIsAnError) {
  std::string msg = error_of([] { Config::from_file("/nonexistent/cfg.yaml"); });
  EXPECT_NE(msg.find("/nonexistent/cfg.yaml"), std::string::npos) << msg;
}

TEST(Config, OverrideErrors) {
  EXPECT_NE(error_of([] {
              Config::from_string("run: {}\n", "f", {"train.lr"});
            }).find("section.key=value"),
            std::string::npos);
  std::string msg = error_of([] { Config::from_string("run: {}\n", "f", {"train.lr=abc"}); });
  EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("command line 'train.lr=abc'"), std::string::npos) << msg;
}

TEST(Config, BatchArithmetic) {
  Config c = Config::from_string("train: {global_batch: 64, micro_batch: 8}\n");
  c.resolve(4);
  EXPECT_EQ(c.resolved.rank_batch, 16);
  EXPECT_EQ(c.resolved.micro_batch, 8);
  EXPECT_EQ(c.resolved.accum_steps, 2);
  Config d = Config::from_string("train: {global_batch: 64}\n");
  d.resolve(2);
  EXPECT_EQ(d.resolved.micro_batch, 32);
  EXPECT_EQ(d.resolved.accum_steps, 1);
}

TEST(Config, GlobalBatchNotDivisibleByWorldNamesKeyAndLine) {
  Config c = Config::from_string("train:\n  global_batch: 30\n", "b.yaml");
  std::string msg = error_of([&] { c.resolve(4); });
  EXPECT_NE(msg.find("train.global_batch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b.yaml:2:3"), std::string::npos) << msg;
}

TEST(Config, MicroBatchNotDividingListsValidChoices) {
  Config c = Config::from_string("train: {global_batch: 24, micro_batch: 5}\n", "m.yaml");
  std::string msg = error_of([&] { c.resolve(2); });
  EXPECT_NE(msg.find("train.micro_batch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("valid choices: 1, 2, 3, 4, 6, 12"), std::string::npos) << msg;
}

TEST(Config, DumpReparsesToTheSameHash) {
  Config c = Config::from_string("train: {lr: 0.1, global_batch: 48}\nmodel: {hidden: [5]}\n");
  c.resolve(3);
  Config d = Config::from_string(c.dump());
  d.resolve(3);
  EXPECT_EQ(c.dump(), d.dump());
  EXPECT_EQ(c.hash(), d.hash());
  Config e = Config::from_string(c.dump(), "x", {"train.lr=0.2"});
  e.resolve(3);
  EXPECT_NE(c.hash(), e.hash());
}

TEST(Config, HelpListsEveryKey) {
  const std::string help = Config::schema_help();
  for (const auto& k : Config::keys()) EXPECT_NE(help.find(k), std::string::npos) << k;
}

TEST(Config, ConfigsShippedWithDtrainParse) {
  for (const char* name : {"fashion_mnist.yaml"}) {
    const std::string path = std::string(dtrain::test::source_dir()) + "/configs/" + name;
    EXPECT_NO_THROW(Config::from_file(path).resolve(2)) << path;
  }
}

}  // namespace
}  // namespace dtrain
