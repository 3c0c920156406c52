// data.format tokens and text (Note [token windows]): windows of seq_len + 1 tokens whose
// targets are the inputs shifted by one, training positions fixed by the seed, evaluation windows
// in order and seq_len apart, the config's resolution from the model section.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace {

using dtrain::test::message_of;
using dtrain::test::TempDir;

// A flat uint16 file whose token i is (i * 7) % 97.
std::string write_tokens(const TempDir& dir, const std::string& name, int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 7) % 97);
  std::ofstream(dir.file(name), std::ios::binary)
      .write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * 2));
  return name;
}

dtrain::DataConfig tokens_config(const TempDir& dir) {
  dtrain::DataConfig c;
  c.format = dtrain::DataFormat::kTokens;
  c.path = dir.path();
  c.seq_len = 8;
  c.num_classes = 97;
  return c;
}

TEST(TokenData, WindowsShiftTargetsByOneAndFollowTheSeed) {
  TempDir dir;
  auto cfg = tokens_config(dir);
  cfg.train_files = write_tokens(dir, "train.bin", 1000);
  cfg.test_files = write_tokens(dir, "val.bin", 41);
  const auto a = dtrain::make_datasets(cfg, 5);
  EXPECT_EQ(a.train->size(), 1000 / 9);  // one pass's worth of windows of 9
  const auto spec = a.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(spec.num_classes, 97);
  EXPECT_EQ(spec.input_dtype, at::kLong);
  std::vector<int64_t> all(static_cast<size_t>(a.train->size()));
  std::iota(all.begin(), all.end(), 0);
  const dtrain::Batch b = a.train->get(all);
  // Each row is a run of the file: next token = (token + 7) % 97, the targets one step ahead.
  const at::Tensor x = b.inputs, y = b.targets;
  EXPECT_TRUE(y.narrow(1, 0, 7).equal(x.narrow(1, 1, 7)));
  EXPECT_TRUE(y.equal((x + 7).remainder(97)));
  // The same seed gives the same windows; another seed others.
  EXPECT_TRUE(dtrain::make_datasets(cfg, 5).train->get(all).inputs.equal(x));
  EXPECT_FALSE(dtrain::make_datasets(cfg, 6).train->get(all).inputs.equal(x));
  // Evaluation: windows 8 apart from the start, (41 - 1) / 8 = 5 of them.
  ASSERT_TRUE(a.test);
  ASSERT_EQ(a.test->size(), 5);
  const at::Tensor t = a.test->get({0, 1, 4}).inputs;
  EXPECT_EQ(t[0][0].item<int64_t>(), 0);
  EXPECT_EQ(t[1][0].item<int64_t>(), (8 * 7) % 97);
  EXPECT_EQ(t[2][0].item<int64_t>(), (32 * 7) % 97);
  cfg.windows = 3;
  EXPECT_EQ(dtrain::make_datasets(cfg, 5).train->size(), 3);
}

TEST(TokenData, ErrorsNameTheFileTheOffsetAndTheKey) {
  TempDir dir;
  auto cfg = tokens_config(dir);
  cfg.train_files = write_tokens(dir, "train.bin", 1000);
  cfg.num_classes = 50;  // tokens up to 96
  const auto d = dtrain::make_datasets(cfg, 0);
  std::vector<int64_t> all(static_cast<size_t>(d.train->size()));
  std::iota(all.begin(), all.end(), 0);
  const std::string range = message_of([&] { d.train->get(all); });
  EXPECT_NE(range.find("train.bin: token"), std::string::npos) << range;
  EXPECT_NE(range.find("outside the vocabulary [0, 50)"), std::string::npos) << range;
  cfg.num_classes = 97;
  cfg.train_files = write_tokens(dir, "tiny.bin", 5);  // shorter than a window of 9
  EXPECT_NE(message_of([&] { dtrain::make_datasets(cfg, 0); }).find("seq_len + 1 = 9"),
            std::string::npos);
  cfg.train_files = "missing_*.bin";
  const std::string none = message_of([&] { dtrain::make_datasets(cfg, 0); });
  EXPECT_NE(none.find("data.train_files"), std::string::npos) << none;
  EXPECT_NE(none.find("no file matches"), std::string::npos) << none;
  cfg.seq_len = 0;
  EXPECT_NE(message_of([&] { dtrain::make_datasets(cfg, 0); }).find("data.seq_len"),
            std::string::npos);
}

TEST(TokenData, ResolveTakesTheWindowAndVocabularyFromTheModel) {
  auto c = dtrain::Config::from_string(
      "model: {name: gpt, seq_len: 32, vocab_size: 300}\n"
      "data: {format: tokens, train_files: x.bin}\ntrain: {global_batch: 4}\n",
      "test", {});
  c.resolve(1);
  EXPECT_EQ(c.data.seq_len, 32);
  EXPECT_EQ(c.data.num_classes, 300);
  auto t = dtrain::Config::from_string(
      "model: {name: gpt, seq_len: 16, vocab_size: 256}\n"
      "data: {format: text, train_files: x.txt, seq_len: 8}\ntrain: {global_batch: 4}\n",
      "test", {});
  t.resolve(1);
  EXPECT_EQ(t.data.seq_len, 8);
  EXPECT_EQ(t.data.num_classes, 256);
}

}  // namespace
