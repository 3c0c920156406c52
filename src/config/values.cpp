#include "config/values.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::config {

void bad_value(const std::string& key, const std::string& where, const std::string& what) {
  throw Error(what + " (" + where + ")", key);
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "null";
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

template <>
int64_t parse_as<int64_t>(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) bad_value(key, where, "expected an integer, got '" + scalar_text(n) + "'");
  const std::string& s = n.Scalar();
  bool too_large = false;
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos, 10);
    if (pos == s.size()) return v;
  } catch (const std::out_of_range&) {
    too_large = true;
  } catch (const std::exception&) {
  }
  // Allow integral floats written as 1e3 or 256.0.
  try {
    size_t pos = 0;
    double d = std::stod(s, &pos);
    if (pos == s.size() && std::isfinite(d) && d == std::floor(d)) {
      if (std::fabs(d) < 9e18) return static_cast<int64_t>(d);
      too_large = true;
    }
  } catch (const std::out_of_range&) {
    too_large = true;
  } catch (const std::exception&) {
  }
  if (too_large)
    bad_value(key, where, "'" + s + "' is out of range for a 64-bit integer (at most about 9e18)");
  bad_value(key, where, "expected an integer, got '" + s + "'");
}

template <>
double parse_as<double>(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) bad_value(key, where, "expected a number, got '" + scalar_text(n) + "'");
  const std::string& s = n.Scalar();
  try {
    size_t pos = 0;
    double v = std::stod(s, &pos);
    if (pos == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  bad_value(key, where, "expected a finite number, got '" + s + "'");
}

template <>
bool parse_as<bool>(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (n.IsScalar()) {
    std::string s = n.Scalar();
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
    if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  }
  bad_value(key, where, "expected true or false, got '" + scalar_text(n) + "'");
}

template <>
std::string parse_as<std::string>(const std::string& key, const YAML::Node& n,
                                  const std::string& where) {
  if (!n.IsScalar()) bad_value(key, where, "expected a string, got '" + scalar_text(n) + "'");
  return n.Scalar();
}

namespace {

// A YAML sequence, or "64,32" / "[64, 32]" from the command line, of numbers of type T.
template <class T>
std::vector<T> parse_list(const std::string& key, const YAML::Node& n, const std::string& where,
                          const char* what) {
  std::vector<T> out;
  if (n.IsSequence()) {
    for (const auto& e : n) out.push_back(parse_as<T>(key, e, where));
  } else if (n.IsScalar()) {
    // "[]" or "" is the empty list. Every entry must be there: "8,,4", "8,4," and "[8,4" are
    // errors, not [8, 4].
    std::string s = n.Scalar();
    auto trim = [](std::string t) {
      t.erase(0, t.find_first_not_of(" \t"));
      t.erase(t.find_last_not_of(" \t") + 1);
      return t;
    };
    s = trim(s);
    const bool open = !s.empty() && s.front() == '[', close = !s.empty() && s.back() == ']';
    if (open != close) bad_value(key, where, "unbalanced brackets in '" + n.Scalar() + "'");
    if (open) s = trim(s.substr(1, s.size() - 2));
    if (s.empty()) return out;
    std::stringstream ss(s + ",");
    std::string item;
    while (std::getline(ss, item, ',')) {
      item = trim(item);
      if (item.empty()) bad_value(key, where, "an empty entry in the list '" + n.Scalar() + "'");
      out.push_back(parse_as<T>(key, YAML::Node(item), where));
    }
  } else if (!n.IsNull()) {
    bad_value(key, where,
              std::string("expected a list of ") + what + ", got '" + scalar_text(n) + "'");
  }
  return out;
}

}  // namespace

template <>
std::vector<int64_t> parse_as<std::vector<int64_t>>(const std::string& key, const YAML::Node& n,
                                                    const std::string& where) {
  return parse_list<int64_t>(key, n, where, "integers");
}

template <>
std::vector<double> parse_as<std::vector<double>>(const std::string& key, const YAML::Node& n,
                                                  const std::string& where) {
  return parse_list<double>(key, n, where, "numbers");
}

template <>
std::vector<std::string> parse_as<std::vector<std::string>>(const std::string& key,
                                                            const YAML::Node& n,
                                                            const std::string& where) {
  return parse_list<std::string>(key, n, where, "strings");
}

std::string show(int64_t v) { return std::to_string(v); }
std::string show(double v) { return detail::exact_double(v); }
std::string show(bool v) { return v ? "true" : "false"; }
std::string show(const std::string& v) {
  YAML::Emitter out;
  out << v;
  return out.c_str();
}
std::string show(const std::vector<int64_t>& v) { return detail::shape_str(v); }
std::string show(const std::vector<double>& v) {
  std::vector<std::string> parts;
  for (double x : v) parts.push_back(detail::exact_double(x));
  return "[" + join(parts, ", ") + "]";
}
std::string show(const std::vector<std::string>& v) {
  YAML::Emitter out;  // in a flow sequence: a name holding a comma or a bracket is quoted
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& s : v) out << s;
  out << YAML::EndSeq;
  return out.c_str();
}

const char* type_name(int64_t*) { return "int"; }
const char* type_name(double*) { return "float"; }
const char* type_name(bool*) { return "bool"; }
const char* type_name(std::string*) { return "string"; }
const char* type_name(std::vector<int64_t>*) { return "int list"; }
const char* type_name(std::vector<double>*) { return "float list"; }
const char* type_name(std::vector<std::string>*) { return "string list"; }

Check<int64_t> at_least(int64_t lo) {
  return [lo](const std::string& key, const int64_t& v, const std::string& where) {
    if (v < lo)
      bad_value(key, where, "must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
  };
}
Check<int64_t> int_range(int64_t lo, int64_t hi, std::string why) {
  return [lo, hi, why](const std::string& key, const int64_t& v, const std::string& where) {
    if (v < lo || v > hi)
      bad_value(key, where,
                "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                    std::to_string(v) + (why.empty() ? "" : " (" + why + ")"));
  };
}
Check<double> positive() {
  return [](const std::string& key, const double& v, const std::string& where) {
    if (!(v > 0)) bad_value(key, where, "must be > 0, got " + show(v));
  };
}
Check<double> non_negative() {
  return [](const std::string& key, const double& v, const std::string& where) {
    if (!(v >= 0)) bad_value(key, where, "must be >= 0, got " + show(v));
  };
}
Check<double> in_range(double lo, double hi) {
  return [lo, hi](const std::string& key, const double& v, const std::string& where) {
    if (!(v >= lo && v < hi))
      bad_value(key, where, "must be in [" + show(lo) + ", " + show(hi) + "), got " + show(v));
  };
}
Check<std::vector<int64_t>> all_positive(bool allow_empty) {
  return [allow_empty](const std::string& key, const std::vector<int64_t>& v,
                       const std::string& where) {
    if (v.empty() && !allow_empty) bad_value(key, where, "must not be empty");
    for (int64_t x : v)
      if (x <= 0) bad_value(key, where, "every entry must be > 0, got " + std::to_string(x));
  };
}

Check<std::vector<double>> count_of(size_t n, Check<double> each) {
  return [n, each](const std::string& key, const std::vector<double>& v, const std::string& where) {
    if (v.size() != n)
      bad_value(key, where,
                "needs " + std::to_string(n) + " numbers, got " + std::to_string(v.size()) + " (" +
                    show(v) + ")");
    if (each)
      for (double x : v) each(key, x, where);
  };
}
Check<std::vector<double>> ordered_pair(double above, double at_most) {
  return [above, at_most](const std::string& key, const std::vector<double>& v,
                          const std::string& where) {
    count_of(2)(key, v, where);
    for (double x : v)
      if (!(x > above && x <= at_most))
        bad_value(
            key, where,
            "every entry must be in (" + show(above) + ", " + show(at_most) + "], got " + show(v));
    if (v[0] > v[1]) bad_value(key, where, "needs [low, high] with low <= high, got " + show(v));
  };
}

Check<std::vector<std::string>> distinct_names() {
  return [](const std::string& key, const std::vector<std::string>& v, const std::string& where) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].empty())
        bad_value(key, where, "entry " + std::to_string(i + 1) + " is an empty name");
      for (size_t j = 0; j < i; ++j)
        if (v[j] == v[i])
          bad_value(key, where,
                    "names '" + v[i] + "' twice (entries " + std::to_string(j + 1) + " and " +
                        std::to_string(i + 1) + "): each class needs its own name");
    }
  };
}

}  // namespace dtrain::config
