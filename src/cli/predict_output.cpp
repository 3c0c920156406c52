#include "cli/predict_output.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "util/format.h"

namespace dtrain::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string number_text(float v) { return detail::format("%.9g", static_cast<double>(v)); }
// The same digits as a JSON number (the double nearest them, which JSON writes back as them).
Json number_json(float v) { return Json(std::stod(number_text(v))); }

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string class_label(const DataSpec& spec, int64_t i) {
  const auto& names = spec.recipe.class_names;
  return i < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(i)] : std::to_string(i);
}

std::string target_name(const DataSpec& spec, int64_t j) {
  const auto& names = spec.recipe.target_names;
  return j < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(j)]
                                                : "value_" + std::to_string(j + 1);
}

std::string classification_text(const at::Tensor& outputs, const PredictTable& t) {
  const DataSpec& spec = *t.spec;
  const at::Tensor probs = outputs.softmax(1).contiguous();
  const int64_t n = probs.size(0), c = probs.size(1);
  const int64_t k = t.top_k > 0 ? std::min(t.top_k, c) : c;
  const bool named = !spec.recipe.class_names.empty();
  std::string text;
  if (t.csv) {
    text = "input";
    for (int64_t r = 1; r <= k; ++r)
      text += ",class_" + std::to_string(r) + ",prob_" + std::to_string(r);
    text += "\n";
  }
  std::vector<int64_t> order(static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i) {
    const float* p = probs.data_ptr<float>() + i * c;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    const std::string& name = (*t.names)[static_cast<size_t>(i)];
    if (t.csv) {
      text += csv_field(name);
      for (int64_t r = 0; r < k; ++r) {
        const int64_t cls = order[static_cast<size_t>(r)];
        text += "," + csv_field(class_label(spec, cls)) + "," + number_text(p[cls]);
      }
      text += "\n";
      continue;
    }
    Json top = Json::array();
    for (int64_t r = 0; r < k; ++r) {
      const int64_t cls = order[static_cast<size_t>(r)];
      Json e{{"index", cls}};
      if (named) e["class"] = class_label(spec, cls);
      e["prob"] = number_json(p[cls]);
      top.push_back(std::move(e));
    }
    text += Json{{"input", name}, {"top", std::move(top)}}.dump() + "\n";
  }
  return text;
}

std::string regression_text(const at::Tensor& outputs, const PredictTable& t) {
  const DataSpec& spec = *t.spec;
  const at::Tensor v = outputs.reshape({outputs.size(0), -1}).contiguous();
  const int64_t n = v.size(0), d = v.size(1);
  const bool named = !spec.recipe.target_names.empty();
  std::string text;
  if (t.csv) {
    text = "input";
    for (int64_t j = 0; j < d; ++j) text += "," + csv_field(target_name(spec, j));
    text += "\n";
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* row = v.data_ptr<float>() + i * d;
    const std::string& name = (*t.names)[static_cast<size_t>(i)];
    if (t.csv) {
      text += csv_field(name);
      for (int64_t j = 0; j < d; ++j) text += "," + number_text(row[j]);
      text += "\n";
      continue;
    }
    Json values = named ? Json::object() : Json::array();
    for (int64_t j = 0; j < d; ++j) {
      if (named) {
        values[target_name(spec, j)] = number_json(row[j]);
      } else {
        values.push_back(number_json(row[j]));
      }
    }
    text += Json{{"input", name}, {"values", std::move(values)}}.dump() + "\n";
  }
  return text;
}

}  // namespace

std::string predict_text(const at::Tensor& outputs, const PredictTable& table) {
  return table.spec->num_classes > 0 ? classification_text(outputs, table)
                                     : regression_text(outputs, table);
}

}  // namespace dtrain::cli
