#include "data/preprocess.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "config/data_formats.h"
#include "data/formats/registry.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

using Json = nlohmann::ordered_json;

Json numbers_or_null(const std::vector<double>& v) { return v.empty() ? Json(nullptr) : Json(v); }

Json recipe_json(const DataSpec& spec, const DataConfig& cfg) {
  const FormatRegistration format = registered_format(cfg.format);
  Json j;
  j["format"] = to_string(cfg.format);
  j["input_shape"] = spec.input_shape;
  j["input_dtype"] = spec.input_dtype == at::kLong ? "int64" : "float32";
  if (spec.num_classes > 0) {
    j["task"] = "classification";
    j["num_classes"] = spec.num_classes;
  } else {
    j["task"] = "regression";
    j["target_dim"] = spec.target_dim;
  }
  const InputRecipe& r = spec.recipe;
  if (!r.class_names.empty()) j["class_names"] = r.class_names;
  if (!r.feature_names.empty()) {
    j["features"] = {{"names", r.feature_names},
                     {"mean", numbers_or_null(r.mean)},
                     {"std", numbers_or_null(r.std)}};
    j["targets"] = r.target_names;
  }
  if (!spec.pixel_mean.empty()) {
    j["pixels"] = {{"scale", 255}, {"mean", spec.pixel_mean}, {"std", spec.pixel_std}};
  } else if (format.host_pixels) {
    // Images standardized on the host (IDX's), one mean and std for every pixel of x / 255.
    j["pixels"] = {{"scale", 255},
                   {"mean", r.mean.empty() ? std::vector<double>{0.0} : r.mean},
                   {"std", r.std.empty() ? std::vector<double>{1.0} : r.std}};
  }
  if (format.eval_transform && spec.input_shape.size() == 3)
    j["eval_transform"] = {
        {"resize", r.resize}, {"center_crop", spec.input_shape[2]}, {"interpolation", "bilinear"}};
  if (spec.input_dtype == at::kLong && !spec.input_shape.empty())
    j["tokens"] = {{"vocab_size", spec.num_classes}, {"seq_len", spec.input_shape[0]}};
  return j;
}

// The config key(s) that set a field (a JSON pointer such as /pixels/mean) under this format:
// its registration's where they differ (formats/registry.h), else the keys every format shares.
std::string keys_of(const std::string& field, const DataConfig& cfg) {
  static const std::vector<std::pair<std::string, std::string>> shared = {
      {"/format", "data.format"},
      {"/input_shape", "data.format"},
      {"/input_dtype", "data.format"},
      {"/task", "data.format"},
      {"/num_classes", "data.num_classes"},
      {"/target_dim", "data.target_columns"},
      {"/targets", "data.target_columns"},
      {"/class_names", "data.class_names"},
      {"/features/names", "data.feature_columns"},
      {"/features",
       "data.normalize, data.train_files, data.test_fraction (the train rows' statistics)"},
      {"/eval_transform/resize", "data.resize"},
      {"/eval_transform", "data.image_size"},
      {"/tokens/vocab_size", "data.num_classes, model.vocab_size"},
      {"/tokens", "data.seq_len"}};
  // `field` is `pointer` or lies under it.
  auto within = [&](const std::string& pointer) {
    return field.rfind(pointer, 0) == 0 &&
           (field.size() == pointer.size() || field[pointer.size()] == '/');
  };
  const FormatRegistration format = registered_format(cfg.format);
  for (const auto* keys : {&format.preprocess_keys, &shared})
    for (const auto& [pointer, key] : *keys)
      if (within(pointer)) return key;
  return "data.format";
}

std::string shown(const Json& v) { return v.is_null() ? "absent" : v.dump(); }

// Equal, or fractions within kSameRelative of each other: statistics recomputed from the same
// data agree that far whatever sums them, and float32 inputs cannot tell such values apart.
constexpr double kSameRelative = 1e-6;
bool same_value(const Json& a, const Json& b) {
  if (a == b) return true;
  if (!a.is_number() || !b.is_number() || !(a.is_number_float() || b.is_number_float()))
    return false;
  const double x = a.get<double>(), y = b.get<double>();
  return std::fabs(x - y) <= kSameRelative * std::max(std::fabs(x), std::fabs(y));
}

// The JSON text parsed into an object with "format"; otherwise an Error naming `path`.
Json parse_recipe(const std::string& text, const std::string& path) {
  Json file;
  try {
    file = Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(std::string("not a preprocess.json (not JSON: ") + e.what() + ")", path);
  }
  if (!file.is_object() || !file.contains("format"))
    throw Error("not a preprocess.json (a JSON object with \"format\" and the run's preprocessing)",
                path);
  return file;
}

// Field `pointer` of `j` as T (a list of numbers or names, a number, a name); `optional` and
// absent (or null): `fallback`. Anything else is an Error naming the field and `path`.
template <typename T>
T field_of(const Json& j, const std::string& pointer, const std::string& path,
           bool optional = false, T fallback = T()) {
  const Json::json_pointer ptr(pointer);
  if (!j.contains(ptr) || j.at(ptr).is_null()) {
    if (optional) return fallback;
    throw Error("preprocess.json has no field " + pointer.substr(1), path);
  }
  try {
    return j.at(ptr).get<T>();
  } catch (const Json::exception&) {
    throw Error("preprocess.json's field " + pointer.substr(1) + " is " + j.at(ptr).dump() +
                    ", not of the type dtrain writes there",
                path);
  }
}

// What dtrain writes, and so what a model may be built from: sizes that are positive and
// agree with each other; anything else is an Error naming `path` and the field.
void check_recipe(const DataSpec& spec, const std::string& path) {
  auto bad = [&](const std::string& what) { throw Error("preprocess.json's " + what, path); };
  int64_t numel = 1;
  for (int64_t d : spec.input_shape) {
    if (d < 1 || d > (int64_t{1} << 31)) bad("input_shape holds " + std::to_string(d));
    numel *= d;
    if (numel > (int64_t{1} << 36)) bad("input_shape is too large");
  }
  if (spec.input_shape.empty()) bad("input_shape is empty");
  if (spec.num_classes < 0 || spec.target_dim < 0 || spec.num_classes + spec.target_dim < 1 ||
      spec.num_classes > (int64_t{1} << 31) || spec.target_dim > (int64_t{1} << 31))
    bad("num_classes or target_dim is not a positive size");
  const InputRecipe& r = spec.recipe;
  if (!r.class_names.empty() && static_cast<int64_t>(r.class_names.size()) > spec.num_classes)
    bad("class_names has more names than num_classes");
  if (!r.feature_names.empty() &&
      static_cast<int64_t>(r.feature_names.size()) != spec.input_shape[0])
    bad("features.names does not name input_shape's features");
  if (r.mean.size() != r.std.size() || spec.pixel_mean.size() != spec.pixel_std.size())
    bad("mean and std differ in length");
  if (!spec.pixel_mean.empty() &&
      static_cast<int64_t>(spec.pixel_mean.size()) != spec.input_shape[0])
    bad("pixels.mean does not give one value per channel of input_shape");
  for (const auto* v : {&r.std, &spec.pixel_std})
    for (double x : *v)
      if (!(x > 0)) bad("std holds " + std::to_string(x) + ", not > 0");
  if (r.resize < 0 || r.resize > (int64_t{1} << 20))
    bad("eval_transform.resize is " + std::to_string(r.resize));
}

}  // namespace

std::string preprocess_json(const DataSpec& spec, const DataConfig& cfg) {
  return recipe_json(spec, cfg).dump(2) + "\n";
}

std::string preprocess_difference(const std::string& text, const std::string& path,
                                  const DataSpec& spec, const DataConfig& cfg) {
  const Json file = parse_recipe(text, path);
  // Leaf by leaf (arrays element by element), this run's fields first; a field only one side
  // has differs too.
  const Json fresh = recipe_json(spec, cfg);
  const Json now = fresh.flatten(), was = file.flatten();
  std::vector<std::string> fields;
  for (auto it = now.begin(); it != now.end(); ++it) fields.push_back(it.key());
  for (auto it = was.begin(); it != was.end(); ++it)
    if (!now.contains(it.key())) fields.push_back(it.key());
  for (const std::string& f : fields) {
    const Json a = was.contains(f) ? was.at(f) : Json(nullptr);
    const Json b = now.contains(f) ? now.at(f) : Json(nullptr);
    if (same_value(a, b)) continue;
    // An array's element names the whole array: both sides' values are shown whole.
    Json::json_pointer ptr(f);
    if (!ptr.empty() && !ptr.back().empty() &&
        ptr.back().find_first_not_of("0123456789") == std::string::npos)
      ptr = ptr.parent_pointer();
    const std::string field = ptr.to_string();
    const Json wv = file.contains(ptr) ? file.at(ptr) : Json(nullptr);
    const Json nv = fresh.contains(ptr) ? fresh.at(ptr) : Json(nullptr);
    return keys_of(field, cfg) + ": the model was trained with " + field.substr(1) + " " +
           shown(wv) + " (" + path + "), this config gives " + shown(nv);
  }
  return "";
}

RunRecipe read_preprocess(const std::string& text, const std::string& path) {
  const Json j = parse_recipe(text, path);
  RunRecipe out;
  const auto format = field_of<std::string>(j, "/format", path);
  const config::FormatRules* known = config::find_format(format);
  if (known == nullptr)
    throw Error("preprocess.json's format '" + format + "' is not a data.format of this dtrain",
                path);
  out.format = DataFormat(known->name);
  DataSpec& spec = out.spec;
  spec.input_shape = field_of<std::vector<int64_t>>(j, "/input_shape", path);
  const auto dtype = field_of<std::string>(j, "/input_dtype", path);
  if (dtype != "float32" && dtype != "int64")
    throw Error("preprocess.json's input_dtype is '" + dtype + "', not float32 or int64", path);
  spec.input_dtype = dtype == "int64" ? at::kLong : at::kFloat;
  if (field_of<std::string>(j, "/task", path) == "classification") {
    spec.num_classes = field_of<int64_t>(j, "/num_classes", path);
  } else {
    spec.target_dim = field_of<int64_t>(j, "/target_dim", path);
  }
  InputRecipe& r = spec.recipe;
  r.class_names = field_of<std::vector<std::string>>(j, "/class_names", path, true);
  if (j.contains("features")) {
    r.feature_names = field_of<std::vector<std::string>>(j, "/features/names", path);
    r.mean = field_of<std::vector<double>>(j, "/features/mean", path, true);
    r.std = field_of<std::vector<double>>(j, "/features/std", path, true);
    r.target_names = field_of<std::vector<std::string>>(j, "/targets", path, true);
  }
  if (j.contains("pixels")) {
    auto mean = field_of<std::vector<double>>(j, "/pixels/mean", path);
    auto stdev = field_of<std::vector<double>>(j, "/pixels/std", path);
    if (field_of<double>(j, "/pixels/scale", path) != 255)
      throw Error("preprocess.json's pixels.scale is not 255, the only scale dtrain writes", path);
    if (registered_format(out.format).host_pixels) {
      r.mean = std::move(mean), r.std = std::move(stdev);
    } else {
      spec.pixel_mean = std::move(mean), spec.pixel_std = std::move(stdev);
    }
  }
  if (j.contains("eval_transform")) r.resize = field_of<int64_t>(j, "/eval_transform/resize", path);
  check_recipe(out.spec, path);
  return out;
}

}  // namespace dtrain::detail
