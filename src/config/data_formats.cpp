// One row per data format (Note [data formats]): its name, its --help text, the data.* keys it
// reads and its defaults. A new format adds its row here and registers its reading under the
// same name in src/data/formats/.
#include "config/data_formats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dtrain/error.h"
#include "util/spelling.h"

namespace dtrain {
namespace config {
namespace {

FormatRules format(const char* name, const char* description, std::vector<std::string> reads) {
  FormatRules f;
  f.name = name;
  f.description = description;
  f.reads = std::move(reads);
  return f;
}

// A config that does not set data.hflip flips no CIFAR image (Note [cifar augmentation]).
void cifar_read(Config& c) {
  if (c.origin_of("data.hflip") == "default") c.data.hflip = false;
}

// Token and text data (Note [token windows]) take their window length and vocabulary from the
// model unless the data section sets them (text is bytes: 256 tokens).
std::function<void(Config&)> windows_of_model(int64_t vocab) {
  return [vocab](Config& c) {
    if (c.data.seq_len == 0) c.data.seq_len = c.model.seq_len;
    if (c.data.num_classes == 0) c.data.num_classes = vocab > 0 ? vocab : c.model.vocab_size;
  };
}

// Evaluation resizes the shorter side to data.resize (Note [image transforms]), by default
// data.image_size x 8/7 rounded (torchvision's recipe: 256 for 224).
void image_folder_resolve(Config& c) {
  if (c.data.resize == 0)
    c.data.resize = std::llround(static_cast<double>(c.data.image_size) * 8.0 / 7.0);
}

std::vector<FormatRules> all_formats() {
  std::vector<FormatRules> v;
  v.push_back(
      format("idx", "MNIST-style files",
             {"data.path", "data.train_images", "data.train_labels", "data.test_images",
              "data.test_labels", "data.normalize", "data.class_names", "data.val_fraction"}));
  v.push_back(format("synthetic", "",
                     {"data.synthetic_task", "data.synthetic_shape", "data.synthetic_size",
                      "data.synthetic_test_size", "data.synthetic_features",
                      "data.synthetic_classes", "data.synthetic_noise", "data.synthetic_uint8"}));
  v.push_back(format("tokens", "nanoGPT / llm.c token files",
                     {"data.path", "data.train_files", "data.test_files", "data.token_dtype",
                      "data.seq_len", "data.windows", "data.val_fraction"}));
  v.back().on_resolve = windows_of_model(0);
  v.push_back(format(
      "text", "bytes",
      {"data.path", "data.train_files", "data.seq_len", "data.windows", "data.test_fraction"}));
  v.back().on_resolve = windows_of_model(256);
  const std::vector<std::string> cifar = {"data.path",
                                          "data.normalize",
                                          "data.train_files",
                                          "data.test_files",
                                          "data.crop_padding",
                                          "data.class_names",
                                          "data.hflip",
                                          "data.auto_augment",
                                          "data.rand_augment_ops",
                                          "data.rand_augment_magnitude",
                                          "data.random_erase",
                                          "data.val_fraction"};
  v.push_back(format("cifar10", "the official binary version", cifar));
  v.back().on_read = cifar_read;
  v.push_back(format("cifar100", "the official binary version", cifar));
  v.back().reads.push_back("data.cifar_labels");
  v.back().on_read = cifar_read;
  v.push_back(format("csv", "numeric columns under a header",
                     {"data.path", "data.normalize", "data.train_files", "data.test_files",
                      "data.test_fraction", "data.class_names", "data.csv_task",
                      "data.target_columns", "data.feature_columns", "data.val_fraction"}));
  v.push_back(format(
      "image_folder", "class folders of JPEG and PNG files, torchvision's ImageFolder layout",
      {"data.path", "data.normalize", "data.train_dir", "data.test_dir", "data.image_size",
       "data.resize", "data.crop_scale", "data.crop_ratio", "data.hflip", "data.scaled_decode",
       "data.decode", "data.pixel_mean", "data.pixel_std", "data.auto_augment",
       "data.rand_augment_ops", "data.rand_augment_magnitude", "data.random_erase"}));
  v.back().not_read = {{"data.class_names", "image folders name their classes by their folders"}};
  v.back().on_resolve = image_folder_resolve;
  return v;
}

}  // namespace

const std::vector<FormatRules>& data_formats() {
  static const std::vector<FormatRules> formats = all_formats();
  return formats;
}

const FormatRules* find_format(const std::string& name) {
  for (const FormatRules& f : data_formats())
    if (name == f.name) return &f;
  return nullptr;
}

const FormatRules& rules_of(DataFormat f) {
  if (const FormatRules* r = find_format(f.name())) return *r;
  std::vector<std::string> names;
  for (const FormatRules& r : data_formats()) names.emplace_back(r.name);
  const std::string near = detail::closest(f.name(), names, 3);
  throw Error(std::string("unknown data format '") + f.name() + "'" +
                  (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                  "; the data formats: " + format_names(", "),
              "data.format");
}

bool format_reads(DataFormat f, const std::string& key) {
  const FormatRules& rules = rules_of(f);
  return std::find(rules.reads.begin(), rules.reads.end(), key) != rules.reads.end();
}

std::string unread_by_format(const Config& c, const std::string& key) {
  if (format_reads(c.data.format, key)) return "";
  const FormatRules& f = rules_of(c.data.format);
  for (const auto& [k, why] : f.not_read)
    if (k == key) return why;
  return std::string("data.format is ") + f.name;
}

std::string format_names(const std::string& sep) {
  std::string s;
  for (const FormatRules& f : data_formats()) s += (s.empty() ? "" : sep) + f.name;
  return s;
}

std::string format_help() {
  // Formats of one description next to each other share it: "cifar10 / cifar100 (...)".
  const auto& all = data_formats();
  auto shares = [&](size_t i, size_t j) {
    return *all[i].description && std::string(all[i].description) == all[j].description;
  };
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) {
    s += (i == 0 ? "" : shares(i - 1, i) ? " / " : ", ") + std::string(all[i].name);
    if (*all[i].description && (i + 1 == all.size() || !shares(i, i + 1)))
      s += std::string(" (") + all[i].description + ")";
  }
  return s;
}

}  // namespace config

const char* to_string(DataFormat v) { return v.name(); }

}  // namespace dtrain
