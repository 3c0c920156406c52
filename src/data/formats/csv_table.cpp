#include "data/formats/csv_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

struct Field {
  std::string text;  // unquoted, without surrounding spaces
};

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return s.substr(a, b - a);
}

// The fields of one line; a field may be quoted ("a,b", "" for a quote inside). `where` is
// "path:line" for errors.
std::vector<Field> split_fields(const std::string& line, const std::string& where) {
  std::vector<Field> out;
  size_t i = 0;
  for (;;) {
    std::string text;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i < line.size() && line[i] == '"') {
      const size_t open = i++;
      for (;;) {
        if (i >= line.size())
          throw Error(
              format("the quote opened at character %zu is not closed on this line", open + 1),
              where + ":" + std::to_string(out.size() + 1));
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            text += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        text += line[i++];
      }
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      if (i < line.size() && line[i] != ',')
        throw Error(format("text after the closing quote at character %zu", i + 1),
                    where + ":" + std::to_string(out.size() + 1));
    } else {
      const size_t start = i;
      while (i < line.size() && line[i] != ',') ++i;
      text = trim(line.substr(start, i - start));
    }
    out.push_back({text});
    if (i >= line.size()) break;
    ++i;  // the comma
  }
  return out;
}

std::string list_text(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The lines of a file: (1-based number, text without the line end), blank ones left out.
std::vector<std::pair<int64_t, std::string>> read_lines(const std::string& path,
                                                        const std::string& key) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(std::string("cannot open ") + path + ": " + std::strerror(errno), key);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(std::string("read failed: ") + std::strerror(errno), path);
  if (all.rfind("\xEF\xBB\xBF", 0) == 0) all.erase(0, 3);  // a UTF-8 byte-order mark
  std::vector<std::pair<int64_t, std::string>> lines;
  int64_t number = 0;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\n', pos);
    if (end == std::string::npos) end = all.size();
    std::string text = all.substr(pos, end - pos);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    ++number;
    if (!trim(text).empty()) lines.emplace_back(number, std::move(text));
    pos = end + 1;
  }
  if (all.empty()) throw Error("empty file: a CSV file needs a header line of column names", path);
  if (lines.empty())
    throw Error("the file holds only blank lines: no header line of column names", path);
  return lines;
}

std::vector<std::string> header_of(const std::string& path,
                                   const std::pair<int64_t, std::string>& line) {
  const std::string where = path + ":" + std::to_string(line.first);
  std::vector<std::string> names;
  std::map<std::string, size_t> seen;
  for (const Field& f : split_fields(line.second, where)) {
    const size_t col = names.size() + 1;
    if (f.text.empty())
      throw Error(format("column %zu of the header has no name", col),
                  where + ":" + std::to_string(col));
    auto [it, fresh] = seen.emplace(f.text, col);
    if (!fresh)
      throw Error(format("the header names column '%s' twice (columns %zu and %zu)", f.text.c_str(),
                         it->second, col),
                  where + ":" + std::to_string(col));
    names.push_back(f.text);
  }
  return names;
}

// The indices of `wanted` in `header`; a name not there is an Error listing the header's names.
std::vector<size_t> indices_of(const std::vector<std::string>& wanted,
                               const std::vector<std::string>& header, const std::string& path,
                               const std::string& key) {
  std::vector<size_t> out;
  for (const auto& name : wanted) {
    size_t i = 0;
    while (i < header.size() && header[i] != name) ++i;
    if (i == header.size())
      throw Error("no column '" + name + "'; the columns of " + path + " are: " + list_text(header),
                  key);
    out.push_back(i);
  }
  return out;
}

// One field as a number; anything else is an Error naming path:line:column and the column.
double number_of(const Field& f, const std::string& where, size_t col, const std::string& name) {
  const std::string at = where + ":" + std::to_string(col + 1);
  const std::string column = format("column %zu '%s'", col + 1, name.c_str());
  if (f.text.empty())
    throw Error(
        column + ": empty field (a missing value); every field the run reads must be a number", at);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(f.text.c_str(), &end);
  if (end == f.text.c_str() || *end != '\0')
    throw Error(column + ": '" + f.text + "' is not a number", at);
  if (!std::isfinite(v) || errno == ERANGE)
    throw Error(column + ": '" + f.text + "' is not a finite number", at);
  return v;
}

void check_class_id(double v, const Field& f, const std::string& where, size_t col,
                    const std::string& name) {
  const std::string at = where + ":" + std::to_string(col + 1);
  const std::string column = format("column %zu '%s'", col + 1, name.c_str());
  if (v < 0)
    throw Error(column + ": class id " + f.text + " is negative; class ids are 0, 1, 2, ...", at);
  if (v != std::floor(v))
    throw Error(column + ": class id " + f.text +
                    " is not a whole number (data.csv_task classification; "
                    "regression targets: data.csv_task regression)",
                at);
  if (v >= 9007199254740992.0) throw Error(column + ": class id " + f.text + " is too large", at);
}

}  // namespace

std::string CsvTable::where(int64_t r) const {
  return files[static_cast<size_t>(file[static_cast<size_t>(r)])] + ":" +
         std::to_string(line[static_cast<size_t>(r)]);
}

CsvTable read_csv(const std::vector<std::string>& paths, const CsvColumns& columns,
                  const std::string& key) {
  if (columns.targets.empty() && (columns.targets_required || columns.features.empty()))
    throw Error("is empty: name the target column(s) by their header names", columns.targets_key);
  if (columns.class_ids && columns.targets.size() != 1)
    throw Error(format("names %zu columns; classification takes one column of class ids (several "
                       "float targets: data.csv_task regression)",
                       columns.targets.size()),
                columns.targets_key);
  CsvTable t;
  t.targets = columns.targets;
  std::vector<std::string> header;
  std::vector<size_t> feature_at, target_at;  // header indices
  for (size_t k = 0; k < paths.size(); ++k) {
    const std::string& path = paths[k];
    const auto lines = read_lines(path, key);
    const std::vector<std::string> names = header_of(path, lines[0]);
    if (k == 0) {
      header = names;
      target_at = indices_of(columns.targets, header, path, columns.targets_key);
      if (columns.features.empty()) {
        for (size_t i = 0; i < header.size(); ++i)
          if (std::find(target_at.begin(), target_at.end(), i) == target_at.end())
            feature_at.push_back(i);
        if (feature_at.empty())
          throw Error(
              "every column is a target (" + columns.targets_key + "): no feature columns are left",
              path);
      } else {
        feature_at = indices_of(columns.features, header, path, columns.features_key);
        for (size_t i : feature_at)
          if (std::find(target_at.begin(), target_at.end(), i) != target_at.end())
            throw Error("column '" + header[i] + "' is both a feature and a target (" +
                            columns.targets_key + ")",
                        columns.features_key);
      }
      for (size_t i : feature_at) t.features.push_back(header[i]);
    } else if (names != header) {
      throw Error("the header differs from " + paths[0] + "'s (" + list_text(header) +
                      "): " + list_text(names),
                  path + ":" + std::to_string(lines[0].first));
    }
    if (lines.size() == 1)
      throw Error("no data rows after the header (line " + std::to_string(lines[0].first) + ")",
                  path);
    t.files.push_back(path);
    for (size_t l = 1; l < lines.size(); ++l) {
      const std::string where = path + ":" + std::to_string(lines[l].first);
      const std::vector<Field> fields = split_fields(lines[l].second, where);
      if (fields.size() != header.size())
        throw Error(
            format("%zu field(s), the header has %zu columns", fields.size(), header.size()),
            where);
      for (size_t i : feature_at)
        t.x.push_back(static_cast<float>(number_of(fields[i], where, i, header[i])));
      for (size_t i : target_at) {
        const double v = number_of(fields[i], where, i, header[i]);
        if (columns.class_ids) check_class_id(v, fields[i], where, i, header[i]);
        t.y.push_back(v);
      }
      t.file.push_back(static_cast<int32_t>(k));
      t.line.push_back(lines[l].first);
    }
  }
  return t;
}

}  // namespace dtrain::detail
