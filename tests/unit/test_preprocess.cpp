// preprocess.json (src/data/preprocess.h): the fields each kind of data writes, read back as
// JSON, and the comparison `dtrain eval` makes, which names the first field that differs, both
// values and the config key that sets it; text that is not such a file is an Error naming it;
// read_preprocess(), `dtrain predict`'s reader, gives back the spec that wrote the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "data/preprocess.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace {

using dtrain::DataConfig;
using dtrain::DataFormat;
using dtrain::DataSpec;
using dtrain::detail::preprocess_difference;
using dtrain::detail::preprocess_json;
using dtrain::detail::read_preprocess;
using dtrain::test::folder_spec;
using dtrain::test::message_of;

DataSpec csv_spec() {
  DataSpec s;
  s.input_shape = {2};
  s.num_classes = 3;
  s.recipe.feature_names = {"height", "width"};
  s.recipe.target_names = {"species"};
  s.recipe.mean = {1.5, -0.25};
  s.recipe.std = {0.1, 3.0};
  return s;
}

DataConfig with_format(DataFormat f) {
  DataConfig c;
  c.format = f;
  return c;
}

TEST(Preprocess, CsvWritesColumnsAndTheirStatistics) {
  const auto j = nlohmann::json::parse(preprocess_json(csv_spec(), with_format(DataFormat::kCsv)));
  EXPECT_EQ(j["format"], "csv");
  EXPECT_EQ(j["task"], "classification");
  EXPECT_EQ(j["num_classes"], 3);
  EXPECT_EQ(j["input_shape"], nlohmann::json::array({2}));
  EXPECT_EQ(j["features"]["names"], nlohmann::json::array({"height", "width"}));
  EXPECT_EQ(j["features"]["mean"][1].get<double>(), -0.25);
  EXPECT_EQ(j["features"]["std"][0].get<double>(), 0.1);  // exact after the text round trip
  EXPECT_EQ(j["targets"], nlohmann::json::array({"species"}));
  EXPECT_FALSE(j.contains("pixels"));
  DataSpec unscaled = csv_spec();
  unscaled.recipe.mean.clear(), unscaled.recipe.std.clear();
  const auto u = nlohmann::json::parse(preprocess_json(unscaled, with_format(DataFormat::kCsv)));
  EXPECT_TRUE(u["features"]["mean"].is_null());
}

TEST(Preprocess, ImagesWritePixelsTransformAndClassNames) {
  const auto j =
      nlohmann::json::parse(preprocess_json(folder_spec(), with_format(DataFormat::kImageFolder)));
  EXPECT_EQ(j["pixels"]["scale"], 255);
  EXPECT_EQ(j["pixels"]["std"][2].get<double>(), 0.225);
  EXPECT_EQ(j["class_names"], nlohmann::json::array({"cat", "dog"}));
  EXPECT_EQ(j["eval_transform"]["resize"], 36);
  EXPECT_EQ(j["eval_transform"]["center_crop"], 32);
  // IDX: standardized on the host, one mean and std (x / 255 first).
  DataSpec idx;
  idx.input_shape = {1, 28, 28};
  idx.num_classes = 10;
  idx.recipe.mean = {0.286}, idx.recipe.std = {0.353};
  const auto i = nlohmann::json::parse(preprocess_json(idx, with_format(DataFormat::kIdx)));
  EXPECT_EQ(i["pixels"]["mean"], nlohmann::json::array({0.286}));
  EXPECT_FALSE(i.contains("eval_transform"));
}

TEST(Preprocess, TokensWriteVocabularyAndLength) {
  DataSpec t;
  t.input_shape = {64};
  t.num_classes = 50257;
  t.input_dtype = at::kLong;
  const auto j = nlohmann::json::parse(preprocess_json(t, with_format(DataFormat::kTokens)));
  EXPECT_EQ(j["input_dtype"], "int64");
  EXPECT_EQ(j["tokens"]["vocab_size"], 50257);
  EXPECT_EQ(j["tokens"]["seq_len"], 64);
}

TEST(Preprocess, DifferenceNamesTheFieldBothValuesAndTheKey) {
  const DataConfig csv = with_format(DataFormat::kCsv);
  const std::string file = preprocess_json(csv_spec(), csv);
  EXPECT_EQ(preprocess_difference(file, "r/preprocess.json", csv_spec(), csv), "");

  DataSpec other = csv_spec();
  other.recipe.mean[1] = 7.0;
  std::string d = preprocess_difference(file, "r/preprocess.json", other, csv);
  EXPECT_EQ(d.rfind("data.normalize, data.train_files", 0), 0u) << d;
  EXPECT_NE(d.find("features/mean [1.5,-0.25] (r/preprocess.json), this config gives [1.5,7.0]"),
            std::string::npos)
      << d;
  // Statistics recomputed within 1e-6 (relative) of the file's are the model's; further apart not.
  other = csv_spec();
  other.recipe.mean[0] = 1.5 * (1 + 3e-7);
  other.recipe.std[1] = 3.0 * (1 - 3e-7);
  EXPECT_EQ(preprocess_difference(file, "p", other, csv), "");
  other.recipe.mean[0] = 1.5 * (1 + 3e-6);
  EXPECT_EQ(preprocess_difference(file, "p", other, csv).rfind("data.normalize", 0), 0u);
  other = csv_spec();
  other.recipe.feature_names = {"width", "height"};
  EXPECT_EQ(preprocess_difference(file, "p", other, csv).rfind("data.feature_columns:", 0), 0u);
  other = csv_spec();
  other.recipe.mean.clear(), other.recipe.std.clear();  // data.normalize=false now
  d = preprocess_difference(file, "p", other, csv);
  EXPECT_EQ(d.rfind("data.normalize", 0), 0u) << d;
  EXPECT_NE(d.find("this config gives absent"), std::string::npos) << d;

  const DataConfig folder = with_format(DataFormat::kImageFolder);
  const std::string images = preprocess_json(folder_spec(), folder);
  DataSpec f = folder_spec();
  f.pixel_mean[0] = 0.5;
  EXPECT_EQ(preprocess_difference(images, "p", f, folder).rfind("data.pixel_mean", 0), 0u);
  f = folder_spec();
  f.recipe.resize = 40;
  EXPECT_EQ(preprocess_difference(images, "p", f, folder).rfind("data.resize:", 0), 0u);
  f = folder_spec();
  f.recipe.class_names = {"cat", "cow"};
  EXPECT_EQ(preprocess_difference(images, "p", f, folder).rfind("data.train_dir", 0), 0u);
  EXPECT_EQ(preprocess_difference(images, "p", folder_spec(), csv).rfind("data.format:", 0), 0u);
}

TEST(Preprocess, TextThatIsNotTheFileIsAnErrorNamingIt) {
  const DataConfig csv = with_format(DataFormat::kCsv);
  for (const std::string text : {"{not json", "[1, 2]", "{\"x\": 1}"}) {
    const std::string m =
        message_of([&] { preprocess_difference(text, "runs/x/preprocess.json", csv_spec(), csv); });
    EXPECT_NE(m.find("runs/x/preprocess.json"), std::string::npos) << text << ": " << m;
    EXPECT_NE(m.find("not a preprocess.json"), std::string::npos) << m;
  }
}

TEST(Preprocess, ReadBackGivesTheSpecThatWroteIt) {
  const auto csv = read_preprocess(preprocess_json(csv_spec(), with_format(DataFormat::kCsv)), "p");
  EXPECT_EQ(csv.format, DataFormat::kCsv);
  EXPECT_EQ(csv.spec.input_shape, csv_spec().input_shape);
  EXPECT_EQ(csv.spec.num_classes, 3);
  EXPECT_EQ(csv.spec.input_dtype, at::kFloat);
  EXPECT_EQ(csv.spec.recipe.feature_names, csv_spec().recipe.feature_names);
  EXPECT_EQ(csv.spec.recipe.target_names, csv_spec().recipe.target_names);
  EXPECT_EQ(csv.spec.recipe.mean, csv_spec().recipe.mean);  // bit for bit through the text
  EXPECT_EQ(csv.spec.recipe.std, csv_spec().recipe.std);
  EXPECT_TRUE(csv.spec.pixel_mean.empty());

  const auto folder =
      read_preprocess(preprocess_json(folder_spec(), with_format(DataFormat::kImageFolder)), "p");
  EXPECT_EQ(folder.format, DataFormat::kImageFolder);
  EXPECT_EQ(folder.spec.pixel_mean, folder_spec().pixel_mean);
  EXPECT_EQ(folder.spec.pixel_std, folder_spec().pixel_std);
  EXPECT_EQ(folder.spec.recipe.class_names, folder_spec().recipe.class_names);
  EXPECT_EQ(folder.spec.recipe.resize, 36);

  DataSpec idx;  // IDX's one mean and std go to the recipe (standardized on the host)
  idx.input_shape = {1, 28, 28};
  idx.num_classes = 10;
  idx.recipe.mean = {0.286}, idx.recipe.std = {0.353};
  const auto i = read_preprocess(preprocess_json(idx, with_format(DataFormat::kIdx)), "p");
  EXPECT_EQ(i.spec.recipe.mean, idx.recipe.mean);
  EXPECT_EQ(i.spec.recipe.std, idx.recipe.std);
  EXPECT_TRUE(i.spec.pixel_mean.empty());

  DataSpec reg;
  reg.input_shape = {3};
  reg.target_dim = 2;
  reg.recipe.feature_names = {"a", "b", "c"};
  reg.recipe.target_names = {"x", "y"};
  const auto r = read_preprocess(preprocess_json(reg, with_format(DataFormat::kCsv)), "p");
  EXPECT_EQ(r.spec.num_classes, 0);
  EXPECT_EQ(r.spec.target_dim, 2);
  EXPECT_TRUE(r.spec.recipe.mean.empty());  // data.normalize off: null in the file

  DataSpec t;
  t.input_shape = {64};
  t.num_classes = 256;
  t.input_dtype = at::kLong;
  const auto tokens = read_preprocess(preprocess_json(t, with_format(DataFormat::kText)), "p");
  EXPECT_EQ(tokens.format, DataFormat::kText);
  EXPECT_EQ(tokens.spec.input_dtype, at::kLong);
  EXPECT_EQ(tokens.spec.input_shape, t.input_shape);
  EXPECT_EQ(tokens.spec.num_classes, 256);
}

TEST(Preprocess, ReadBackRefusesMissingOrMistypedFieldsNamingThem) {
  const std::string base = R"("format": "csv", "input_dtype": "float32", "task": "classification")";
  const std::pair<std::string, std::string> cases[] = {
      {"{" + base + R"(, "num_classes": 3})", "input_shape"},
      {"{" + base + R"(, "input_shape": [2]})", "num_classes"},
      {"{" + base + R"(, "input_shape": "2", "num_classes": 3})", "input_shape"},
      {"{" + base + R"(, "input_shape": [2], "num_classes": 3, "features": {"names": [1, 2]}})",
       "features/names"},
      {R"({"format": "parquet", "input_shape": [2]})", "parquet"},
      {"{not json", "not a preprocess.json"},
  };
  for (const auto& [text, field] : cases) {
    const std::string m = message_of([&] { read_preprocess(text, "runs/x/preprocess.json"); });
    EXPECT_NE(m.find("runs/x/preprocess.json"), std::string::npos) << text << ": " << m;
    EXPECT_NE(m.find(field), std::string::npos) << text << ": " << m;
  }
}

}  // namespace
