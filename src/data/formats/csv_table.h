// Numeric CSV files: a header line of column names, then one row of numbers per line.
// Invariants (tests/unit/test_csv_data.cpp): every row has as many fields as the header; every
// field of a column the run reads is a finite number (a class id: a whole number >= 0); anything
// else is an Error naming file:line:column (the column's number and name). Blank lines are
// skipped, CRLF line ends and a UTF-8 byte-order mark are accepted, fields may be quoted ("a,b").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::detail {

// Which columns a run reads, by header name, and how it reads the targets.
struct CsvColumns {
  std::vector<std::string> targets;   // one or more; exactly one when `class_ids`
  std::vector<std::string> features;  // empty: every column that is not a target, in file order
  bool class_ids = false;             // targets are class ids (whole numbers >= 0)
  // false: `targets` may be empty (`features` then names every column read; dtrain predict's
  // rows, whose label column is optional).
  bool targets_required = true;
  std::string targets_key = "data.target_columns", features_key = "data.feature_columns";
};

// The rows of one or more CSV files with the same header, as the columns asked for.
struct CsvTable {
  std::vector<std::string> features;  // the feature columns' names, in the order of `x`
  std::vector<std::string> targets;
  std::vector<float> x;   // rows x features, row-major
  std::vector<double> y;  // rows x targets, row-major (class ids are whole numbers)
  // Where each row came from: files[file[r]], line[r] (1-based), for errors about its values.
  std::vector<std::string> files;
  std::vector<int32_t> file;
  std::vector<int64_t> line;
  int64_t rows() const { return static_cast<int64_t>(line.size()); }
  // "path:line" of row r.
  std::string where(int64_t r) const;
};

// Reads `paths` (their rows appended in order); `key` names the config key that listed them.
// Every file must have the first file's header.
CsvTable read_csv(const std::vector<std::string>& paths, const CsvColumns& columns,
                  const std::string& key);

}  // namespace dtrain::detail
