// `dtrain predict`'s records (src/cli/predict_output.h): the top-k classes by probability,
// highest first and of equal ones the lower index first, with the run's class names; regression
// values under the target names; CSV rows with a header and quoted fields; float32 values with 9
// significant digits, which read back exact.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "cli/predict_output.h"

namespace {

using dtrain::DataSpec;
using dtrain::cli::predict_text;
using dtrain::cli::PredictTable;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(PredictOutput, TopClassesByProbabilityWithNames) {
  DataSpec spec;
  spec.num_classes = 3;
  spec.recipe.class_names = {"cat", "dog", "fox"};
  const std::vector<std::string> names = {"a.png", "b,c.png"};
  // Row 0: dog, then cat and fox tied (cat first: the lower index); row 1: fox first.
  const at::Tensor logits = at::tensor({0.0f, 2.0f, 0.0f, -1.0f, 0.5f, 3.0f}).view({2, 3});
  PredictTable t;
  t.names = &names;
  t.spec = &spec;
  t.top_k = 2;
  const auto lines = lines_of(predict_text(logits, t));
  ASSERT_EQ(lines.size(), 2u);
  const auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["input"], "a.png");
  ASSERT_EQ(j["top"].size(), 2u);
  EXPECT_EQ(j["top"][0]["index"], 1);
  EXPECT_EQ(j["top"][0]["class"], "dog");
  EXPECT_EQ(j["top"][1]["class"], "cat");
  const at::Tensor p = logits.softmax(1);
  // 9 significant digits read back as the float exactly.
  EXPECT_EQ(static_cast<float>(j["top"][0]["prob"].get<double>()), p[0][1].item<float>());
  EXPECT_EQ(nlohmann::json::parse(lines[1])["top"][0]["class"], "fox");

  t.top_k = 0;  // every class
  EXPECT_EQ(nlohmann::json::parse(lines_of(predict_text(logits, t))[1])["top"].size(), 3u);
  t.top_k = 9;  // capped at the classes
  EXPECT_EQ(nlohmann::json::parse(lines_of(predict_text(logits, t))[1])["top"].size(), 3u);

  t.top_k = 1;
  t.csv = true;
  const auto rows = lines_of(predict_text(logits, t));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], "input,class_1,prob_1");
  EXPECT_EQ(rows[2].rfind("\"b,c.png\",fox,", 0), 0u) << rows[2];
}

TEST(PredictOutput, ClassIndicesWithoutNames) {
  DataSpec spec;
  spec.num_classes = 2;
  const std::vector<std::string> names = {"rows.csv:2"};
  PredictTable t;
  t.names = &names;
  t.spec = &spec;
  const auto j = nlohmann::json::parse(predict_text(at::tensor({1.0f, 0.0f}).view({1, 2}), t));
  EXPECT_EQ(j["top"][0]["index"], 0);
  EXPECT_FALSE(j["top"][0].contains("class"));
  t.csv = true;
  EXPECT_EQ(
      lines_of(predict_text(at::tensor({1.0f, 0.0f}).view({1, 2}), t))[1].rfind("rows.csv:2,0,", 0),
      0u);
}

TEST(PredictOutput, RegressionValuesUnderTheTargetNames) {
  DataSpec spec;
  spec.target_dim = 2;
  spec.recipe.target_names = {"x", "y"};
  const std::vector<std::string> names = {"r.csv:2"};
  PredictTable t;
  t.names = &names;
  t.spec = &spec;
  const at::Tensor v = at::tensor({0.1f, -2.5f}).view({1, 2});
  EXPECT_EQ(predict_text(v, t),
            "{\"input\":\"r.csv:2\",\"values\":{\"x\":0.100000001,\"y\":-2.5}}\n");
  t.csv = true;
  EXPECT_EQ(predict_text(v, t), "input,x,y\nr.csv:2,0.100000001,-2.5\n");
  spec.recipe.target_names.clear();
  t.csv = false;
  EXPECT_EQ(predict_text(v, t), "{\"input\":\"r.csv:2\",\"values\":[0.100000001,-2.5]}\n");
}

}  // namespace
