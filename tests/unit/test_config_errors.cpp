// Config input that is wrong in ways a parser could let pass: duplicates, empty or non-map
// documents, keys without values, junk in lists and numbers, overrides of sections, run names
// that leave run.dir. Each is a dtrain::Error naming the key and the file:line or argument.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "dtrain/config.h"
#include "session/unused_keys.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::message_of;
using test::TempDir;

// Expects `msg` to hold every one of `parts`.
void expect_all(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' in: " << msg;
}

TEST(ConfigErrors, DuplicateKeyNamesFileBothLinesAndKey) {
  expect_all(message_of([] {
               Config::from_string("train:\n  lr: 0.1\n  epochs: 2\n  lr: 0.2\n", "d.yaml");
             }),
             {"train.lr", "duplicate key", "d.yaml:4:3", "first at d.yaml:2:3"});
  // In flow style, on one line: the columns tell them apart.
  expect_all(message_of([] { Config::from_string("train: {lr: 0.1, lr: 0.2}\n", "f.yaml"); }),
             {"train.lr", "duplicate key", "f.yaml:1:18", "first at f.yaml:1:9"});
}

TEST(ConfigErrors, DuplicateSectionNamesFileBothLines) {
  // The keys differ, so only the section is repeated: the later one must not replace the first.
  expect_all(message_of([] {
               Config::from_string("train:\n  lr: 0.1\nmodel: {}\ntrain:\n  epochs: 2\n", "s.yaml");
             }),
             {"train", "duplicate section", "s.yaml:4:1", "first at s.yaml:1:1"});
}

TEST(ConfigErrors, EmptyOrCommentOnlyConfigIsAnError) {
  for (const char* text : {"", "\n\n", "# just a comment\n# and another\n", "---\n...\n"})
    expect_all(message_of([&] { Config::from_string(text, "e.yaml"); }),
               {"e.yaml", "the config is empty"});
  TempDir dir;
  { std::ofstream(dir.file("c.yaml")) << "# nothing but comments\n"; }
  expect_all(message_of([&] { Config::from_file(dir.file("c.yaml")); }),
             {"c.yaml", "the config is empty"});
}

TEST(ConfigErrors, DirectoryAsConfigIsAnError) {
  TempDir dir;
  expect_all(message_of([&] { Config::from_file(dir.path()); }), {"is a directory"});
  EXPECT_NE(message_of([&] { Config::from_file(dir.path()); }).find(dir.path()), std::string::npos);
}

TEST(ConfigErrors, NonMapDocumentsAreErrors) {
  for (const char* text : {"hello\n", "- run\n- train\n", "42\n"})
    expect_all(message_of([&] { Config::from_string(text, "n.yaml"); }),
               {"n.yaml:1:1", "must be a map"});
  expect_all(message_of([] { Config::from_string("train: [lr, 0.1]\n", "n.yaml"); }),
             {"train", "expected a map of keys"});
}

TEST(ConfigErrors, SecondYamlDocumentIsAnError) {
  // YAML::Load would read the first document and drop the second without a word.
  expect_all(message_of([] {
               Config::from_string("train: {lr: 0.1}\n---\ntrain: {lr: 0.2}\n", "m.yaml");
             }),
             {"m.yaml", "2 YAML documents", "m.yaml:3:1"});
}

TEST(ConfigErrors, KeyWithoutValueIsAnError) {
  expect_all(message_of([] { Config::from_string("train:\n  lr:\n", "v.yaml"); }),
             {"train.lr", "no value", "v.yaml:2:3"});
  // A list key without a value is not the empty list.
  expect_all(message_of([] { Config::from_string("model:\n  hidden:\n", "v.yaml"); }),
             {"model.hidden", "no value", "v.yaml:2:3"});
  EXPECT_TRUE(Config::from_string("model: {hidden: []}\n").model.hidden.empty());
}

TEST(ConfigErrors, NonScalarKeyIsAnError) {
  expect_all(message_of([] { Config::from_string("? [a, b]\n: 1\n", "k.yaml"); }),
             {"k.yaml:1", "plain name", "[a, b]"});
  expect_all(message_of([] { Config::from_string("train:\n  ? {lr: 1}\n  : 2\n", "k.yaml"); }),
             {"k.yaml:2", "plain name", "under 'train'"});
}

TEST(ConfigErrors, ListsWithJunkAreErrors) {
  auto msg = [](const std::string& o) {
    return message_of([&] { Config::from_string("run: {}\n", "f", {o}); });
  };
  expect_all(msg("model.hidden=8,,4"), {"model.hidden", "empty entry", "'8,,4'"});
  expect_all(msg("model.hidden=8,4,"), {"model.hidden", "empty entry"});
  expect_all(msg("model.hidden=[8,4"), {"model.hidden", "unbalanced"});
  expect_all(msg("model.hidden=8 4"), {"model.hidden", "'8 4'"});
  expect_all(msg("model.channels=8,x"), {"model.channels", "'x'"});
  // Named at the key: column len("model: {") + 1.
  expect_all(message_of([] { Config::from_string("model: {hidden: [8, [4]]}\n", "l.yaml"); }),
             {"model.hidden", "l.yaml:1:9", "'[4]'"});
  expect_all(message_of([] { Config::from_string("model: {hidden: {a: 1}}\n", "l.yaml"); }),
             {"model.hidden", "list of integers"});
  // The forms that are fine.
  EXPECT_EQ(Config::from_string("run: {}\n", "f", {"model.hidden=[8, 4]"}).model.hidden,
            (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(Config::from_string("run: {}\n", "f", {"model.hidden= 8 , 4 "}).model.hidden,
            (std::vector<int64_t>{8, 4}));
  EXPECT_TRUE(Config::from_string("run: {}\n", "f", {"model.hidden=[]"}).model.hidden.empty());
}

TEST(ConfigErrors, NumbersWithTrailingJunkOrOutOfRangeAreErrors) {
  auto msg = [](const std::string& o) {
    return message_of([&] { Config::from_string("run: {}\n", "f", {o}); });
  };
  expect_all(msg("train.epochs=3x"), {"train.epochs", "'3x'"});
  expect_all(msg("train.lr=0.1.2"), {"train.lr", "'0.1.2'"});
  expect_all(msg("train.lr=1e-3abc"), {"train.lr", "'1e-3abc'"});
  expect_all(msg("train.lr=nan"), {"train.lr", "finite"});
  expect_all(msg("train.epochs=99999999999999999999"),
             {"train.epochs", "out of range for a 64-bit"});
  expect_all(msg("train.epochs=1e19"), {"train.epochs", "out of range for a 64-bit"});
  expect_all(msg("train.epochs=2.5"), {"train.epochs", "'2.5'"});
  EXPECT_EQ(Config::from_string("run: {}\n", "f", {"train.epochs=1e3"}).train.epochs, 1000);
}

TEST(ConfigErrors, OverrideOfASectionOrWithoutAValueIsAnError) {
  auto msg = [](const std::string& o) {
    return message_of([&] { Config::from_string("run: {}\n", "f", {o}); });
  };
  expect_all(msg("train=1"), {"'train' is a section", "command line 'train=1'"});
  expect_all(msg("train={lr: 0.1}"), {"'train' is a section"});
  expect_all(msg("train.lr="), {"train.lr", "empty value", "command line 'train.lr='",
                                "train.lr=\"''\" on a command line"});
  expect_all(msg("data.crop_scale="), {"data.crop_scale", "empty value", "data.crop_scale=[]"});
  expect_all(msg("run.name= "), {"run.name", "empty value"});
  expect_all(msg("train.lr.x=1"), {"train.lr.x", "unknown key"});
  expect_all(msg("train.lr={a: 1}"), {"train.lr", "expected a number"});
  // An empty string is written as such.
  EXPECT_EQ(Config::from_string("run: {}\n", "f", {"data.test_images=''"}).data.test_images, "");
}

TEST(ConfigErrors, SameKeyTwiceOnTheCommandLineIsAnError) {
  expect_all(
      message_of([] {
        Config::from_string("run: {}\n", "f", {"train.lr=0.1", "train.epochs=2", "train.lr=0.2"});
      }),
      {"train.lr", "set twice on the command line", "'train.lr=0.1'", "'train.lr=0.2'"});
}

TEST(ConfigErrors, RunNameMustStayInsideRunDir) {
  auto resolve_with = [](const std::string& name, const std::string& dir = "runs") {
    Config c;
    c.run.name = name;
    c.run.dir = dir;
    c.resolve(1);
  };
  for (const char* name : {"..", "../x", "a/../../b", "a/..", "/tmp/x", ".", "./a", "a//b", "a/"})
    expect_all(message_of([&] { resolve_with(name); }), {"run.name", "must stay inside run.dir"});
  expect_all(message_of([&] { resolve_with(""); }), {"run.name", "is empty while run.dir is set"});
  // Plain names, nested ones too, are fine; with no run.dir nothing is written, so an empty
  // name is fine as well.
  for (const char* name : {"exp1", "sweep/lr0.1", "a..b", "..a", "with space"})
    EXPECT_NO_THROW(resolve_with(name)) << name;
  EXPECT_NO_THROW(resolve_with("", ""));
  // The message says where the name came from.
  Config c = Config::from_string("run:\n  name: ../up\n", "r.yaml");
  expect_all(message_of([&] { c.resolve(1); }), {"run.name", "'../up'", "r.yaml:2:3"});
}

TEST(ConfigErrors, NumClassesKeyIsChecked) {
  EXPECT_EQ(Config::from_string("data: {num_classes: 12}\n").data.num_classes, 12);
  EXPECT_EQ(Config().data.num_classes, 0);
  expect_all(message_of([] { Config::from_string("data: {num_classes: -1}\n", "c.yaml"); }),
             {"data.num_classes", ">= 0", "c.yaml:1:8"});
}

TEST(ConfigErrors, SettingsYamlLoadsAgainAsTheSameConfig) {
  // Values that YAML would read as something else unless the dump quotes them.
  Config c = Config::from_string(
      "run: {name: 'yes', dir: ''}\nmodel: {name: mlp, hidden: []}\n"
      "data: {test_images: '', test_labels: 'null', path: '#x: y'}\ntrain: {lr: 0.1, micro_batch: "
      "auto}\n",
      "q.yaml");
  const std::string yaml = c.settings_yaml();
  EXPECT_EQ(yaml.find('#' + std::string(" resolved")), std::string::npos) << yaml;
  Config d = Config::from_string(yaml, "dump");
  EXPECT_EQ(d.settings_yaml(), yaml);
  EXPECT_EQ(d.run.name, "yes");
  EXPECT_EQ(d.run.dir, "");
  EXPECT_TRUE(d.model.hidden.empty());
  EXPECT_EQ(d.data.test_images, "");
  EXPECT_EQ(d.data.test_labels, "null");
  EXPECT_EQ(d.data.path, "#x: y");
  EXPECT_EQ(d.train.micro_batch, -1);
}

TEST(ConfigErrors, KeysTheRunDoesNotReadAreWarnedAbout) {
  Config c = Config::from_string(
      "model:\n  name: mlp\n  channels: [8]\n  hidden: [4]\ndata:\n  format: synthetic\n  path: "
      "/x\n"
      "train:\n  optimizer: adam\n  momentum: 0.9\n",
      "u.yaml", {"model.n_embd=64"});
  const auto lines = detail::unused_keys(c);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_EQ(lines.size(), 4u) << all;
  expect_all(all, {"model.channels is set (u.yaml:3:3) but not used: model.name is mlp",
                   "model.n_embd is set (command line 'model.n_embd=64')",
                   "data.path is set (u.yaml:7:3) but not used: data.format is synthetic",
                   "train.momentum is set (u.yaml:10:3) but not used: train.optimizer is adam"});
  // Defaults are never reported, and a model dtrain does not know may read any key.
  EXPECT_TRUE(detail::unused_keys(Config()).empty());
  EXPECT_TRUE(
      detail::unused_keys(Config::from_string("model: {name: mine, channels: [8]}\n")).empty());
}

// An override without its section, in the wrong section, or under another framework's name is
// told the key it means (and, without a section, how overrides are written).
TEST(ConfigErrors, OverridesGetTheKeyTheyMean) {
  const auto said = [](const std::string& o) {
    return message_of([&] { Config::from_string("run: {}\n", "s.yaml", {o}); });
  };
  test::expect_all(said("max_steps=5"), {"'train.max_steps'", "overrides are section.key=value"});
  test::expect_all(said("model.lr=0.1"), {"did you mean 'train.lr'"});
  test::expect_all(said("train.learning_rate=0.1"), {"did you mean 'train.lr'"});
  test::expect_all(said("batch_size=64"), {"did you mean 'train.global_batch'"});
  test::expect_all(said("train.epochz=2"), {"did you mean 'train.epochs'"});
}

}  // namespace
}  // namespace dtrain
