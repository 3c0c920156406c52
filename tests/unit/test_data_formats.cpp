// One home per data format (Note [data formats], src/data/formats/registry.h): the config's half
// of each format is its row in src/config/data_formats.cpp (its name, the data.* keys it reads,
// the defaults it derives), the reading half its registration by its own file in
// src/data/formats/ (its splits, dtrain eval's test split, the key behind each preprocess.json
// field, dtrain predict's reader). Both list the same formats; the schema, make_datasets(),
// preprocess.json and dtrain predict take everything from them; an unknown format is an Error
// naming data.format.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/data_formats.h"
#include "config/schema.h"
#include "data/formats/registry.h"
#include "data/preprocess.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::expect_all;
using test::message_of;

const std::vector<std::string> kFormats = {"idx",     "synthetic", "tokens", "text",
                                           "cifar10", "cifar100",  "csv",    "image_folder"};

std::vector<std::string> config_names() {
  std::vector<std::string> names;
  for (const auto& f : config::data_formats()) names.emplace_back(f.name);
  return names;
}

// The registered formats with `what`, by name.
template <class Has>
std::vector<std::string> registered_with(Has what) {
  std::vector<std::string> out;
  for (const auto& name : kFormats)
    if (what(detail::registered_format(DataFormat(name.c_str())))) out.push_back(name);
  return out;
}

TEST(DataFormats, TheConfigAndTheRegistryListTheSameFormatsInHelpOrder) {
  EXPECT_EQ(config_names(), kFormats);
  std::vector<std::string> registered = detail::registered_format_names();
  registered.erase(
      std::remove_if(registered.begin(), registered.end(),
                     [](const std::string& n) { return n.rfind("test_", 0) == 0; }),  // this file's
      registered.end());
  EXPECT_EQ(registered, kFormats);
  // The constants of config.h name formats of both halves.
  for (const DataFormat f :
       {DataFormat::kIdx, DataFormat::kSynthetic, DataFormat::kTokens, DataFormat::kText,
        DataFormat::kCifar10, DataFormat::kCifar100, DataFormat::kCsv, DataFormat::kImageFolder}) {
    EXPECT_NE(config::find_format(f.name()), nullptr) << f.name();
    EXPECT_EQ(detail::registered_format(f).name, f.name());
  }
  EXPECT_EQ(DataFormat("csv"), DataFormat::kCsv);
  EXPECT_NE(DataFormat("csv"), DataFormat::kIdx);
}

TEST(DataFormats, DataFormatsChoiceIsTheRowsNames) {
  const config::Field* f = config::find_field("data.format");
  ASSERT_NE(f, nullptr);
  expect_all(
      f->help,
      {"idx (MNIST-style files), synthetic, tokens (nanoGPT / llm.c token files), text (bytes), "
       "cifar10 / cifar100 (the official binary version), csv",
       "(idx | synthetic | tokens | text | cifar10 | cifar100 | csv | image_folder)"});
  expect_all(message_of([] { Config::from_string("data: {format: parquet}\n", "d.yaml"); }),
             {"data.format", "d.yaml:1:",
              "must be one of idx | synthetic | tokens | text | cifar10 | cifar100 | csv | "
              "image_folder, got 'parquet'"});
  for (const auto& name : kFormats)
    EXPECT_STREQ(Config::from_string("data: {format: " + name + "}\n").data.format.name(),
                 name.c_str());
}

TEST(DataFormats, TheFormatsListTheKeysTheirRunsRead) {
  std::set<std::string> by_format, listed;
  for (const auto& f : config::schema())
    if (f.read_by_formats) by_format.insert(f.key);
  for (const auto& format : config::data_formats()) {
    for (const auto& key : format.reads) {
      EXPECT_TRUE(by_format.count(key))
          << format.name << " reads " << key << ", not a .by_format() row";
      listed.insert(key);
    }
    for (const auto& [key, why] : format.not_read) EXPECT_TRUE(by_format.count(key)) << key;
  }
  EXPECT_EQ(listed, by_format);  // every .by_format() key is read by some format
  auto unused = [](const std::string& format, const std::string& key,
                   const std::vector<std::string>& set = {}) {
    const Config c = Config::from_string("data: {format: " + format + "}\n", "<string>", set);
    return config::find_field(key)->unused_because(c);
  };
  EXPECT_EQ(unused("idx", "data.train_images"), "");
  EXPECT_EQ(unused("csv", "data.train_images"), "data.format is csv");
  EXPECT_EQ(unused("synthetic", "data.path"), "data.format is synthetic");
  EXPECT_EQ(unused("cifar100", "data.cifar_labels"), "");
  EXPECT_EQ(unused("cifar10", "data.cifar_labels"), "data.format is cifar10");
  // A format's own reason, and the rows' conditions beyond the format.
  EXPECT_EQ(unused("image_folder", "data.class_names"),
            "image folders name their classes by their folders");
  EXPECT_EQ(unused("csv", "data.class_names"), "");
  EXPECT_EQ(unused("csv", "data.class_names", {"data.csv_task=regression"}),
            "data.csv_task is regression");
  EXPECT_EQ(unused("tokens", "data.class_names"), "data.format is tokens");
  EXPECT_EQ(unused("text", "data.test_fraction", {"data.test_files=t.txt"}), "");
  EXPECT_EQ(unused("csv", "data.test_fraction"), "");
  EXPECT_EQ(unused("csv", "data.test_fraction", {"data.test_files=t.csv"}),
            "data.test_files names the test split");
  EXPECT_EQ(unused("tokens", "data.test_fraction"), "data.format is tokens");
}

TEST(DataFormats, DerivedDefaultsComeFromTheFormatsRow) {
  std::vector<std::string> on_read, on_resolve;
  for (const auto& f : config::data_formats()) {
    if (f.on_read) on_read.emplace_back(f.name);
    if (f.on_resolve) on_resolve.emplace_back(f.name);
  }
  EXPECT_EQ(on_read, (std::vector<std::string>{"cifar10", "cifar100"}));
  EXPECT_EQ(on_resolve, (std::vector<std::string>{"tokens", "text", "image_folder"}));
  auto resolved = [](const std::string& yaml) {
    Config c = Config::from_string(yaml);
    c.resolve(1);
    return c.data;
  };
  const DataConfig tokens =
      resolved("model: {seq_len: 48, vocab_size: 300}\ndata: {format: tokens}\n");
  EXPECT_EQ(tokens.seq_len, 48);
  EXPECT_EQ(tokens.num_classes, 300);
  const DataConfig text =
      resolved("model: {seq_len: 48, vocab_size: 300}\ndata: {format: text, seq_len: 8}\n");
  EXPECT_EQ(text.seq_len, 8);
  EXPECT_EQ(text.num_classes, 256);
  EXPECT_EQ(resolved("data: {format: image_folder, image_size: 112}\n").resize, 128);
  EXPECT_EQ(resolved("data: {format: idx}\n").resize, 0);  // not an image folder's
  EXPECT_FALSE(Config::from_string("data: {format: cifar100}\n").data.hflip);
  EXPECT_TRUE(Config::from_string("data: {format: cifar100, hflip: true}\n").data.hflip);
  EXPECT_TRUE(Config::from_string("data: {format: image_folder}\n").data.hflip);
}

TEST(DataFormats, EachFormatsReadingComesFromItsRegistration) {
  using detail::FormatRegistration;
  EXPECT_EQ(registered_with(
                [](const FormatRegistration& r) { return static_cast<bool>(r.predict_inputs); }),
            (std::vector<std::string>{"idx", "cifar10", "cifar100", "csv", "image_folder"}));
  EXPECT_EQ(registered_with(
                [](const FormatRegistration& r) { return static_cast<bool>(r.prompt_tokens); }),
            (std::vector<std::string>{"tokens", "text"}));
  EXPECT_EQ(registered_with([](const FormatRegistration& r) {
              return static_cast<bool>(r.recorded_test_split);
            }),
            (std::vector<std::string>{"idx", "cifar10", "cifar100", "csv"}));
  EXPECT_EQ(registered_with([](const FormatRegistration& r) { return r.host_pixels; }),
            (std::vector<std::string>{"idx"}));
  EXPECT_EQ(registered_with([](const FormatRegistration& r) { return r.eval_transform; }),
            (std::vector<std::string>{"image_folder"}));
  // preprocess.json's keys: the format's own, then the shared ones.
  const auto csv = detail::registered_format(DataFormat::kCsv).preprocess_keys;
  EXPECT_NE(
      std::find(csv.begin(), csv.end(),
                std::make_pair(std::string("/input_shape"), std::string("data.feature_columns"))),
      csv.end());
  DataSpec spec;
  spec.input_shape = {4};
  spec.num_classes = 3;
  DataConfig cfg;
  cfg.format = DataFormat::kSynthetic;
  const std::string written = detail::preprocess_json(spec, cfg);
  spec.input_shape = {5};
  EXPECT_EQ(detail::preprocess_difference(written, "p", spec, cfg)
                .rfind("data.synthetic_features, data.synthetic_shape:", 0),
            0u);
  // dtrain predict's prompts: token ids written in decimal, or text's bytes.
  const auto tokens = detail::registered_format(DataFormat::kTokens);
  EXPECT_EQ(tokens.prompt_tokens(" 1 22\n3", 50, "--prompt"), (std::vector<int64_t>{1, 22, 3}));
  EXPECT_EQ(tokens.token_text({1, 22, 3}), "1 22 3\n");
  expect_all(message_of([&] { tokens.prompt_tokens("1 x", 50, "--prompt"); }),
             {"--prompt", "byte 2: a token id is a decimal number"});
  expect_all(message_of([&] { tokens.prompt_tokens("1 50", 50, "p.txt"); }),
             {"p.txt", "token 50 is not below the vocabulary size 50"});
  const auto text = detail::registered_format(DataFormat::kText);
  EXPECT_EQ(text.prompt_tokens("Hi", 256, "--prompt"), (std::vector<int64_t>{72, 105}));
  EXPECT_EQ(text.token_text({72, 105}), "Hi");
}

TEST(DataFormats, MakeDatasetsBuildsTheRegisteredSplits) {
  detail::FormatRegistration r;
  r.name = "test_only_format";
  r.make_splits = [](const DataConfig&, int64_t seed, const at::Device&) {
    Splits s;
    s.train = std::make_shared<TensorDataset>(at::full({3, 1}, static_cast<double>(seed)),
                                              at::zeros({3}, at::kLong), DataSpec{},
                                              "registered in the test");
    return s;
  };
  detail::register_format(r);
  DataConfig cfg;
  cfg.format = DataFormat("test_only_format");
  const Splits s = make_datasets(cfg, 7);
  EXPECT_EQ(s.train->describe(), "registered in the test");
  EXPECT_EQ(s.test, nullptr);
  EXPECT_EQ(s.train->get({0}).inputs.item<float>(), 7.0f);
}

TEST(DataFormats, AnUnknownFormatIsAnErrorNamingDataFormat) {
  DataConfig cfg;
  cfg.format = DataFormat("imagefolder");
  expect_all(
      message_of([&] { make_datasets(cfg, 0); }),
      {"data.format", "unknown data format 'imagefolder' (did you mean 'image_folder'?)",
       "the data formats: idx, synthetic, tokens, text, cifar10, cifar100, csv, image_folder"});
  Config c;
  c.data.format = DataFormat("parquet");
  expect_all(message_of([&] { c.resolve(1); }), {"data.format", "unknown data format 'parquet'"});
  expect_all(
      message_of([] { detail::read_preprocess(R"({"format": "parquet"})", "pre.json"); }),
      {"pre.json", "preprocess.json's format 'parquet' is not a data.format of this dtrain"});
}

}  // namespace
}  // namespace dtrain
