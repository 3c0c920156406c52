// The schema: the one table of every config key, with its type, help text, parser, range check
// and how the dump writes it. Parsing, overrides, `--help`, the dump and the hash all walk it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain {
class Config;
}

namespace dtrain::config {

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
};

const std::vector<Field>& schema();
const Field* find_field(const std::string& key);
// The section names, in schema order.
const std::vector<std::string>& sections();

}  // namespace dtrain::config
