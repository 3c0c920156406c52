// data.class_names (config.h, data/labels.h): the key parses as a list of strings from YAML and
// the command line and dumps back to the same list; an empty or repeated name, or a count other
// than the model's classes, is an Error naming the key; idx and csv runs carry the names in both
// splits' spec, and preprocess.json writes them and reads them back (what `dtrain predict` names
// its classes by); image folders and regression do not read the key, and the unused-key
// warning says why. (CIFAR's label-name files: test_cifar_data.cpp.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "data/preprocess.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "session/unused_keys.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::message_of;
using test::TempDir;

const std::vector<std::string> kFashion = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                           "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                           "Bag",         "Ankle boot"};

using dtrain::test::expect_all;

TEST(ClassNames, ParsedFromYamlAndTheCommandLineAndDumpedBack) {
  const Config yaml = Config::from_string(
      "data:\n  format: idx\n  class_names: [T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, "
      "Shirt, Sneaker, "
      "Bag, Ankle boot]\n");
  EXPECT_EQ(yaml.data.class_names, kFashion);
  EXPECT_EQ(Config::from_string("data: {format: idx}\n", "<s>", {"data.class_names=cat,dog, bird"})
                .data.class_names,
            (std::vector<std::string>{"cat", "dog", "bird"}));
  const Config quoted =
      Config::from_string("data: {format: idx}\n", "<s>", {"data.class_names=[\"a, b\", 'c]', d]"});
  EXPECT_EQ(quoted.data.class_names, (std::vector<std::string>{"a, b", "c]", "d"}));
  EXPECT_TRUE(Config::from_string("data: {format: idx}\n").data.class_names.empty());
  // The dump loads back as the same names (config.yaml of a run).
  for (const Config* c : {&yaml, &quoted})
    EXPECT_EQ(Config::from_string(c->dump()).data.class_names, c->data.class_names) << c->dump();
}

TEST(ClassNames, AnEmptyOrRepeatedNameOrNotAListIsAnErrorNamingTheKey) {
  const std::string empty =
      message_of([] { Config::from_string("data: {class_names: [a, '', b]}\n", "x.yaml"); });
  expect_all(empty, {"data.class_names", "entry 2 is an empty name", "x.yaml"});
  const std::string twice =
      message_of([] { Config::from_string("data: {}\n", "x.yaml", {"data.class_names=a,b,a"}); });
  expect_all(twice, {"data.class_names", "names 'a' twice (entries 1 and 3)", "command line"});
  const std::string map =
      message_of([] { Config::from_string("data: {class_names: {a: 1}}\n", "x.yaml"); });
  expect_all(map, {"data.class_names", "expected a list of strings"});
  const std::string nested =
      message_of([] { Config::from_string("data: {class_names: [a, [b]]}\n", "x.yaml"); });
  expect_all(nested, {"data.class_names", "expected a string"});
}

// Two IDX files of 4 images of 1 x 2 with labels 0, 1, 2, 1 (3 classes) in `dir`.
void write_idx(const TempDir& dir) {
  auto file = [](const std::string& path, std::vector<unsigned char> bytes) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  };
  file(dir.file("img"),
       {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 2, 0, 255, 51, 102, 153, 204, 10, 20});
  file(dir.file("lab"), {0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 2, 1});
}

DataConfig idx_config(const TempDir& dir, const std::vector<std::string>& names) {
  DataConfig cfg = Config::from_string("data: {format: idx}\n").data;
  cfg.path = dir.path();
  cfg.train_images = cfg.test_images = "img";
  cfg.train_labels = cfg.test_labels = "lab";
  cfg.class_names = names;
  return cfg;
}

TEST(ClassNames, AnIdxRunCarriesThemIntoBothSplitsAndPreprocessJson) {
  TempDir dir;
  write_idx(dir);
  const std::vector<std::string> names = {"zero", "one", "two"};
  const DataConfig cfg = idx_config(dir, names);
  const Splits s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->spec().recipe.class_names, names);
  EXPECT_EQ(s.test->spec().recipe.class_names, names);
  const std::string text = detail::preprocess_json(s.train->spec(), cfg);
  EXPECT_EQ(nlohmann::json::parse(text)["class_names"], nlohmann::json(names)) << text;
  EXPECT_EQ(detail::read_preprocess(text, "p.json").spec.recipe.class_names, names);
  // dtrain eval's test split (the run's recorded spec) names them too, and agrees with the file.
  const auto recorded = detail::make_recorded_test_split(cfg, s.train->spec(), 0, at::kCPU);
  EXPECT_EQ(recorded->spec().recipe.class_names, names);
  EXPECT_EQ(detail::preprocess_difference(text, "p.json", recorded->spec(), cfg), "");
  // Other names under eval: the difference names the key.
  const DataConfig renamed = idx_config(dir, {"a", "b", "c"});
  const std::string diff = detail::preprocess_difference(
      text, "p.json", make_datasets(renamed, 0).test->spec(), renamed);
  expect_all(diff,
             {"data.class_names", "class_names [\"zero\",\"one\",\"two\"]", "[\"a\",\"b\",\"c\"]"});
  // Without the key: no names, and no class_names field.
  const Splits plain = make_datasets(idx_config(dir, {}), 0);
  EXPECT_TRUE(plain.train->spec().recipe.class_names.empty());
  EXPECT_FALSE(nlohmann::json::parse(detail::preprocess_json(plain.train->spec(), cfg))
                   .contains("class_names"));
}

TEST(ClassNames, ACountOtherThanTheClassesIsAnErrorNamingKeyCountAndRule) {
  TempDir dir;
  write_idx(dir);
  const std::string few = message_of([&] { make_datasets(idx_config(dir, {"zero", "one"}), 0); });
  expect_all(few, {"data.class_names", "gives 2 names for the model's 3 classes",
                   "taken from the train labels"});
  DataConfig more = idx_config(dir, {"a", "b", "c"});
  more.num_classes = 4;
  expect_all(
      message_of([&] { make_datasets(more, 0); }),
      {"data.class_names", "gives 3 names for the model's 4 classes", "set by data.num_classes"});
}

TEST(ClassNames, ACsvClassificationRunCarriesThem) {
  TempDir dir;
  std::ofstream(dir.file("t.csv")) << "x,y\n0.5,0\n1.5,1\n2.5,0\n3.5,1\n4.5,1\n";
  DataConfig cfg =
      Config::from_string("data: {format: csv, target_columns: y, test_fraction: 0.4}\n").data;
  cfg.path = dir.path();
  cfg.train_files = "t.csv";
  cfg.num_classes = 2;
  cfg.class_names = {"no", "yes"};
  const Splits s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->spec().recipe.class_names, cfg.class_names);
  EXPECT_EQ(s.test->spec().recipe.class_names, cfg.class_names);
  cfg.class_names = {"no", "yes", "maybe"};
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {"data.class_names", "gives 3 names for the model's 2 classes"});
}

TEST(ClassNames, ImageFoldersAndRegressionDoNotReadTheKey) {
  std::string all;
  for (const auto& line : detail::unused_keys(
           Config::from_string("data: {format: image_folder, class_names: [a, b]}\n")))
    all += line + "\n";
  EXPECT_NE(all.find("data.class_names is set"), std::string::npos) << all;
  EXPECT_NE(all.find("image folders name their classes by their folders"), std::string::npos)
      << all;
  all.clear();
  for (const auto& line : detail::unused_keys(
           Config::from_string("data: {format: csv, csv_task: regression, class_names: [a]}\n")))
    all += line + "\n";
  EXPECT_NE(all.find("data.csv_task is regression"), std::string::npos) << all;
  EXPECT_TRUE(
      detail::unused_keys(Config::from_string("data: {format: cifar10, class_names: [a]}\n"))
          .empty());
}

}  // namespace
}  // namespace dtrain
