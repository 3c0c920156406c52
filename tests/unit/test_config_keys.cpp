// One home per fact about a config key (config/schema.h): every schema row says what the key
// applies to, whether it may change on resume and what it sizes; the built-in models declare the
// model.* keys they read; the unused-key warnings, the resume rule and the memory hints follow.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/schema.h"
#include "dtrain/config.h"
#include "dtrain/models.h"
#include "session/unused_keys.h"

namespace dtrain {
namespace {

using config::Applies;
using config::OnResume;
using config::Sizes;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

TEST(ConfigKeys, EveryKeySaysWhatItAppliesToAndWhetherItMayChangeOnResume) {
  std::vector<std::string> unclassified;
  for (const auto& f : config::schema()) {
    if (f.applies == Applies::kUnset) unclassified.push_back(f.key + ": applies to what?");
    if (f.applies == Applies::kWhen && !f.unused_because)
      unclassified.push_back(f.key + ": when, without a condition");
    if (f.on_resume == OnResume::kUnset)
      unclassified.push_back(f.key + ": may it change on resume?");
    if (f.applies == Applies::kModel && !starts_with(f.key, "model."))
      unclassified.push_back(f.key + ": only model.* keys are declared by models");
    if (f.sizes == Sizes::kData && !starts_with(f.key, "data."))
      unclassified.push_back(f.key + ": sizes the data?");
    if (f.sizes == Sizes::kModel && !starts_with(f.key, "model."))
      unclassified.push_back(f.key + ": sizes the model?");
  }
  EXPECT_GT(config::schema().size(), 100u);
  EXPECT_TRUE(unclassified.empty()) << joined(unclassified);
}

TEST(ConfigKeys, TheResumeRuleIsTheModelTheDataAndTheSampleOrder) {
  // What may not change: the model, the data (but how it is loaded) and the sample order.
  const std::set<std::string> fixed = {"run.seed", "train.global_batch", "train.optimizer",
                                       "train.drop_last", "train.loss"};
  const std::set<std::string> loading = {"data.workers", "data.prefetch", "data.pin_memory",
                                         "data.decode"};
  for (const auto& f : config::schema()) {
    const bool expect = fixed.count(f.key) || starts_with(f.key, "model.") ||
                        (starts_with(f.key, "data.") && !loading.count(f.key));
    EXPECT_EQ(f.on_resume == OnResume::kMustMatch, expect) << f.key;
  }
}

TEST(ConfigKeys, TheBuiltInModelsDeclareEveryModelKeyTheyRead) {
  std::set<std::string> by_model, declared;
  for (const auto& f : config::schema())
    if (f.applies == Applies::kModel) by_model.insert(f.key);
  for (const char* name : {"linear", "mlp", "cnn", "gpt", "resnet18", "resnet50", "torchscript"}) {
    const auto keys = model_keys(name);
    ASSERT_TRUE(keys) << name << " declares no keys";
    for (const auto& k : *keys) {
      EXPECT_TRUE(by_model.count(k))
          << name << " declares " << k << ", which the schema does not give to models";
      declared.insert(k);
    }
  }
  // Every key the schema gives to models is read by one of them.
  for (const auto& k : by_model)
    EXPECT_TRUE(declared.count(k)) << k << " is read by no built-in model";
  EXPECT_EQ(model_keys("gpt")->size(), 10u);
  EXPECT_FALSE(model_keys("no such model"));
  EXPECT_ANY_THROW(register_model(
      "bad_keys", [](const ModelConfig&, const DataSpec&) { return nullptr; }, "",
      std::vector<std::string>{"train.lr"}));
}

std::string all_unused(const Config& c) {
  std::string s;
  for (const auto& l : detail::unused_keys(c)) s += l + "\n";
  return s;
}

TEST(ConfigKeys, UnusedWarningsFollowTheDeclarations) {
  // ResNet alone reads model.channels_last; a model registered with its keys is held to them, one
  // registered without is not.
  const std::string mlp =
      all_unused(Config::from_string("model: {name: mlp, channels_last: true}\n"));
  EXPECT_NE(mlp.find("model.channels_last is set ("), std::string::npos) << mlp;
  EXPECT_NE(mlp.find(") but not used: model.name is mlp"), std::string::npos) << mlp;
  EXPECT_EQ(all_unused(Config::from_string("model: {name: resnet18, channels_last: true}\n")), "");
  auto factory = [](const ModelConfig&, const DataSpec&) -> std::shared_ptr<Model> {
    return nullptr;
  };
  register_model("keys_declared", factory, "a test model that declares model.hidden",
                 std::vector<std::string>{"model.hidden"});
  register_model("keys_unsaid", factory, "a test model that declares no keys");
  const std::string declared =
      all_unused(Config::from_string("model: {name: keys_declared, hidden: [4], fc: 8}\n"));
  EXPECT_EQ(declared.find("model.hidden"), std::string::npos) << declared;
  EXPECT_NE(declared.find("model.fc is set"), std::string::npos) << declared;
  EXPECT_EQ(all_unused(Config::from_string("model: {name: keys_unsaid, hidden: [4], fc: 8}\n")),
            "");
  // Conditions on the config: data.test_fraction with CSV files named for the test split.
  const std::string csv = all_unused(
      Config::from_string("data: {format: csv, test_files: t.csv, test_fraction: 0.2}\n"));
  EXPECT_NE(csv.find("but not used: data.test_files names the test split"), std::string::npos)
      << csv;
  EXPECT_EQ(csv.find("data.test_files is set"), std::string::npos) << csv;
}

}  // namespace
}  // namespace dtrain
