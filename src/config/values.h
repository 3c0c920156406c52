// The typed parsers and range checks of config values. Each throws a dtrain::Error naming the key
// and where the value came from ("x.yaml:3:5", "command line 'train.lr=abc'").
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::config {

[[noreturn]] void bad_value(const std::string& key, const std::string& where,
                            const std::string& what);
// A node as text for messages ("[1, 2]" for a sequence).
std::string scalar_text(const YAML::Node& n);
std::string join(const std::vector<std::string>& v, const std::string& sep);

template <class T>
T parse_as(const std::string& key, const YAML::Node& n, const std::string& where);
template <>
int64_t parse_as<int64_t>(const std::string& key, const YAML::Node& n, const std::string& where);
template <>
double parse_as<double>(const std::string& key, const YAML::Node& n, const std::string& where);
template <>
bool parse_as<bool>(const std::string& key, const YAML::Node& n, const std::string& where);
template <>
std::string parse_as<std::string>(const std::string& key, const YAML::Node& n,
                                  const std::string& where);
// A YAML sequence, or "64,32" / "[64, 32]" from the command line.
template <>
std::vector<int64_t> parse_as<std::vector<int64_t>>(const std::string& key, const YAML::Node& n,
                                                    const std::string& where);
template <>
std::vector<double> parse_as<std::vector<double>>(const std::string& key, const YAML::Node& n,
                                                  const std::string& where);
// A YAML sequence of strings, or "a,b" / "[a, b]" from the command line (an entry holding a
// comma is written quoted inside brackets: '["a, b", c]').
template <>
std::vector<std::string> parse_as<std::vector<std::string>>(const std::string& key,
                                                            const YAML::Node& n,
                                                            const std::string& where);

// A value as the dump writes it (and the parser reads back).
std::string show(int64_t v);
std::string show(double v);
std::string show(bool v);
std::string show(const std::string& v);
std::string show(const std::vector<int64_t>& v);
std::string show(const std::vector<double>& v);
std::string show(const std::vector<std::string>& v);  // a YAML flow sequence, quoted where needed

const char* type_name(int64_t*);
const char* type_name(double*);
const char* type_name(bool*);
const char* type_name(std::string*);
const char* type_name(std::vector<int64_t>*);
const char* type_name(std::vector<double>*);
const char* type_name(std::vector<std::string>*);

// A range check of one key's value; empty = any value.
template <class T>
using Check = std::function<void(const std::string& key, const T& v, const std::string& where)>;

Check<int64_t> at_least(int64_t lo);
Check<int64_t> int_range(int64_t lo, int64_t hi, std::string why = {});  // [lo, hi]; `why` says why
Check<double> positive();
Check<double> non_negative();
Check<double> in_range(double lo, double hi);  // [lo, hi)
Check<std::vector<int64_t>> all_positive(bool allow_empty);
// Exactly `n` numbers, each passing `each` (empty: any).
Check<std::vector<double>> count_of(size_t n, Check<double> each = {});
// Two numbers lo <= hi, both in (above, at_most].
Check<std::vector<double>> ordered_pair(double above, double at_most);
// Names that are not empty and each given once.
Check<std::vector<std::string>> distinct_names();

}  // namespace dtrain::config
