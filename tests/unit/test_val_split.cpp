// data.val_fraction (data/splits.h, hold_out): the held-out indices by their rule (disjoint,
// together every sample, the count round(f N), the same for the same seed, another set for
// another seed), the splits make_datasets builds for idx-like samples and for token files (the
// last fraction of each file, in order), and the errors that name the key.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace dtrain::detail {
namespace {

TEST(ValSplit, HeldOutIndicesFollowTheRule) {
  const auto [train, val] = held_out_indices(1000, 0.1, 7);
  EXPECT_EQ(val.size(), 100u);
  EXPECT_EQ(train.size(), 900u);
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end()) && std::is_sorted(val.begin(), val.end()));
  std::set<int64_t> all(train.begin(), train.end());
  for (const int64_t v : val) EXPECT_TRUE(all.insert(v).second) << v;
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(*all.rbegin(), 999);
  EXPECT_EQ(held_out_indices(1000, 0.1, 7).second, val);
  EXPECT_NE(held_out_indices(1000, 0.1, 8).second, val);
  EXPECT_EQ(held_out_indices(1001, 0.25, 1).second.size(), 250u);  // round(250.25)
  test::expect_all(test::message_of([] { held_out_indices(5, 0.05, 1); }),
                   {"data.val_fraction", "5"});
}

TEST(ValSplit, SyntheticSamplesAreNotHeldOutButClassesAre) {
  Config c = Config::from_string(
      "data: {format: synthetic, synthetic_task: classification, synthetic_size: 200, "
      "synthetic_test_size: 10,\n"
      "       val_fraction: 0.1}\n",
      "v.yaml");
  // synthetic does not read the key: no validation split (the schema warns that it is unused).
  EXPECT_FALSE(make_datasets(c.data, 1).val);
}

TEST(ValSplit, TokenFilesKeepTheirLastFractionInOrder) {
  test::TempDir dir;
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 50);
  std::ofstream(dir.file("train.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * 2));
  Config c = Config::from_string(
      "data: {format: tokens, train_files: train.bin, seq_len: 9, num_classes: 50,\n"
      "       val_fraction: 0.2}\n",
      "t.yaml", {"data.path=" + dir.path()});
  const Splits s = make_datasets(c.data, 1);
  ASSERT_TRUE(s.val);
  // Tokens 800..999 in windows of 10 every 9 tokens (as a test split's), in order: 22 windows,
  // the first at token 800; the training windows come from tokens 0..799 alone.
  EXPECT_EQ(s.val->size(), 22);
  const Batch b = s.val->get({0, 1});
  EXPECT_EQ(b.inputs[0][0].item<int64_t>(), 800 % 50);
  EXPECT_EQ(b.inputs[1][0].item<int64_t>(), 809 % 50);
  EXPECT_NE(s.train->describe().find("800 tokens"), std::string::npos) << s.train->describe();
  test::expect_all(test::message_of([&] {
                     Config tiny = c;
                     tiny.data.val_fraction = 0.005;
                     make_datasets(tiny.data, 1);
                   }),
                   {"data.val_fraction"});
}

}  // namespace
}  // namespace dtrain::detail
