// The schema: the one table of every config key, with its type, help text, parser, range check
// and how the dump writes it. Parsing, overrides, `--help`, the dump and the hash all walk it.
// Each row also says what the key applies to (every run, the models that declare it when they
// register, or a condition on the config such as the data format), whether it sizes the data or
// the model, and whether it may change when a run resumes: the unused-key warnings
// (session/unused_keys.h), the host out-of-memory hints (session.cpp) and the resume check
// (train/resume.cpp) are derived from it (tests/unit/test_config_keys.cpp: every key says all
// of it).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dtrain {
class Config;
}

namespace dtrain::config {

// What a key applies to: every run; the model whose registration declares it (model.* keys,
// models.h's register_model); or runs the row's condition accepts (data.* keys: the data format
// that lists it, by_format()). kUnset: the row does not say.
enum class Applies { kUnset, kAlways, kModel, kWhen };
// Whether a checkpoint written under another value may be resumed. kUnset: the row does not say.
enum class OnResume { kUnset, kMayChange, kMustMatch };
// What the key sizes in host memory, for the hint of an out-of-memory error.
enum class Sizes { kNothing, kData, kModel };

struct Field {
  std::string key;   // "section.name"
  std::string type;  // shown in --help
  std::string help;
  // Parses, checks and stores the value; throws an Error naming the key and `where`.
  std::function<void(Config&, const YAML::Node&, const std::string& where)> set;
  std::function<std::string(const Config&)> get;
  // Numeric keys: the range check alone (Config::check_value); empty for other keys.
  std::function<void(double, const std::string& where)> check_number;
  // Integer-list keys: the same for a list.
  std::function<void(const std::vector<int64_t>&, const std::string& where)> check_list;

  Applies applies = Applies::kUnset;
  // kWhen: "" when a run with this config reads the key, else why not ("data.format is csv").
  std::function<std::string(const Config&)> unused_because;
  // by_format(): the data formats that list the key decide (config/data_formats.h).
  bool read_by_formats = false;
  OnResume on_resume = OnResume::kUnset;
  Sizes sizes = Sizes::kNothing;

  // The row's classification, chained onto field() / choice().
  Field& always() {
    applies = Applies::kAlways;
    return *this;
  }
  Field& by_model() {
    applies = Applies::kModel;
    return *this;
  }
  Field& when(std::function<std::string(const Config&)> why_not) {
    applies = Applies::kWhen;
    unused_because = std::move(why_not);
    return *this;
  }
  // A data.* key read by the formats that list it among their keys (config/data_formats.h), and
  // there only where `also` (if given) finds nothing against it: a kWhen row.
  Field& by_format(std::function<std::string(const Config&)> also = {});
  Field& may_change() {
    on_resume = OnResume::kMayChange;
    return *this;
  }
  Field& must_match() {
    on_resume = OnResume::kMustMatch;
    return *this;
  }
  Field& sizes_data() {
    sizes = Sizes::kData;
    return *this;
  }
  Field& sizes_model() {
    sizes = Sizes::kModel;
    return *this;
  }
};

const std::vector<Field>& schema();
const Field* find_field(const std::string& key);
// Sets `key` of `c` from `value` as a command-line override `key=value` would (config.cpp:
// Config::apply_override's parse and range check, without recording the origin): an Error
// names the key and `where`; an unknown key says the closest known one, a section or an empty
// value is refused.
void set_from_text(Config& c, const std::string& key, const std::string& value,
                   const std::string& where);
// The section names, in schema order.
const std::vector<std::string>& sections();

}  // namespace dtrain::config
