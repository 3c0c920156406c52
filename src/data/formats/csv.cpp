// data.format csv: numeric CSV files (csv_table.h) as a classification or regression dataset.
// Inputs (N, F) float from the feature columns, standardized per column with the train split's
// mean and std (data.normalize); targets (N,) int64 class ids (data.csv_task classification,
// named by data.class_names) or (N, D) float (regression). The test split is data.test_files,
// or else data.test_fraction of the train files' rows drawn with run.seed (the same rows on
// every rank). dtrain eval's test split (make_csv_test_split) reads data.test_files alone, with the
// run's statistics and classes. Registered as data.format csv (Note [data formats]); `dtrain
// predict` reads a CSV file's rows (inputs.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "data/files.h"
#include "data/formats/csv_table.h"
#include "data/formats/registry.h"
#include "data/labels.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

// Rows of a table: which ones, in order.
using Rows = std::vector<int64_t>;

Rows all_rows(const CsvTable& t) {
  Rows r(static_cast<size_t>(t.rows()));
  for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<int64_t>(i);
  return r;
}

// A seeded random share `fraction` of the rows (kept in file order) and the rest.
std::pair<Rows, Rows> split_rows(const CsvTable& t, double fraction, int64_t seed) {
  Rows order = all_rows(t);
  std::mt19937_64 rng(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 29);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  const auto n_test =
      static_cast<size_t>(std::llround(fraction * static_cast<double>(order.size())));
  std::vector<bool> is_test(order.size(), false);
  for (size_t i = 0; i < n_test; ++i) is_test[static_cast<size_t>(order[i])] = true;
  Rows train, test;
  for (size_t i = 0; i < order.size(); ++i)
    (is_test[i] ? test : train).push_back(static_cast<int64_t>(i));
  return {train, test};
}

// The feature columns' mean and population std over `rows` (double sums).
void column_stats(const CsvTable& t, const Rows& rows, std::vector<double>& mean,
                  std::vector<double>& stdev) {
  const size_t f = t.features.size();
  mean.assign(f, 0.0);
  stdev.assign(f, 0.0);
  for (int64_t r : rows)
    for (size_t j = 0; j < f; ++j) mean[j] += t.x[static_cast<size_t>(r) * f + j];
  for (size_t j = 0; j < f; ++j) mean[j] /= static_cast<double>(rows.size());
  for (int64_t r : rows)
    for (size_t j = 0; j < f; ++j) {
      const double d = t.x[static_cast<size_t>(r) * f + j] - mean[j];
      stdev[j] += d * d;
    }
  for (size_t j = 0; j < f; ++j) stdev[j] = std::sqrt(stdev[j] / static_cast<double>(rows.size()));
}

struct Columns {
  at::Tensor inputs, targets;
};

// The rows' features (standardized when `mean` is not empty) and targets as tensors.
Columns tensors_of(const CsvTable& t, const Rows& rows, bool class_ids,
                   const std::vector<double>& mean, const std::vector<double>& stdev) {
  const auto n = static_cast<int64_t>(rows.size());
  const auto f = static_cast<int64_t>(t.features.size()),
             d = static_cast<int64_t>(t.targets.size());
  Columns c;
  c.inputs = at::empty({n, f}, at::kFloat);  // (N, F)
  float* x = c.inputs.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = t.x.data() + rows[static_cast<size_t>(i)] * f;
    for (int64_t j = 0; j < f; ++j) {
      const auto k = static_cast<size_t>(j);
      x[i * f + j] = mean.empty() ? row[j] : static_cast<float>((row[j] - mean[k]) / stdev[k]);
    }
  }
  if (class_ids) {
    c.targets = at::empty({n}, at::kLong);  // (N,)
    int64_t* y = c.targets.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      y[i] = static_cast<int64_t>(t.y[static_cast<size_t>(rows[static_cast<size_t>(i)])]);
  } else {
    c.targets = at::empty({n, d}, at::kFloat);  // (N, D)
    float* y = c.targets.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j)
        y[i * d + j] =
            static_cast<float>(t.y[static_cast<size_t>(rows[static_cast<size_t>(i)] * d + j)]);
  }
  return c;
}

// The class ids of `rows` against `space`: the first outside is an Error naming its file:line.
void check_class_ids(const CsvTable& t, const Rows& rows, const LabelSpace& space,
                     const std::string& column) {
  int64_t bad = 0, first = -1;
  for (int64_t r : rows) {
    const auto v = static_cast<int64_t>(t.y[static_cast<size_t>(r)]);
    if (v >= space.classes) {
      if (first < 0) first = r;
      ++bad;
    }
  }
  if (first >= 0)
    throw Error(label_error(static_cast<int64_t>(t.y[static_cast<size_t>(first)]),
                            "column '" + column + "'", bad, space),
                t.where(first));
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The columns the config names (data.target_columns, data.feature_columns, data.csv_task).
CsvColumns columns_of(const DataConfig& cfg) {
  CsvColumns columns;
  columns.targets = split_list(cfg.target_columns);
  columns.features = split_list(cfg.feature_columns);
  columns.class_ids = cfg.csv_task == CsvTask::kClassification;
  if (!columns.class_ids && cfg.num_classes > 0)
    throw Error("is " + std::to_string(cfg.num_classes) +
                    ", but data.csv_task is regression: leave it at 0",
                "data.num_classes");
  return columns;
}

}  // namespace

std::shared_ptr<Dataset> make_csv_test_split(const DataConfig& cfg, const DataSpec& recorded,
                                             int64_t seed) {
  if (cfg.test_files.empty())
    return make_csv_splits(cfg, seed, &recorded).test;  // rows of the train files
  const CsvColumns columns = columns_of(cfg);
  const bool classify = columns.class_ids;
  const CsvTable test =
      read_csv(expand_files(cfg, cfg.test_files, "data.test_files"), columns, "data.test_files");
  const Rows rows = all_rows(test);
  DataSpec spec;
  spec.input_shape = {static_cast<int64_t>(test.features.size())};
  if (classify) {
    const LabelSpace space = label_space(cfg, recorded.num_classes, "the run's (preprocess.json)");
    check_class_ids(test, rows, space, test.targets[0]);
    spec.num_classes = space.classes;
    spec.recipe.class_names = class_names(cfg, space);
  } else {
    spec.target_dim = static_cast<int64_t>(test.targets.size());
  }
  std::vector<double> mean, stdev;
  // Columns or statistics other than the run's: dtrain eval's comparison with preprocess.json
  // names the key that differs.
  if (cfg.normalize && recorded.recipe.mean.size() == test.features.size())
    mean = recorded.recipe.mean, stdev = recorded.recipe.std;
  spec.recipe.feature_names = test.features;
  spec.recipe.target_names = test.targets;
  spec.recipe.mean = mean, spec.recipe.std = stdev;
  const Columns te = tensors_of(test, rows, classify, mean, stdev);
  return std::make_shared<TensorDataset>(
      te.inputs, te.targets, spec,
      format("csv %s (%lld rows)", files_text(test.files).c_str(),
             static_cast<long long>(rows.size())));
}

Splits make_csv_splits(const DataConfig& cfg, int64_t seed, const DataSpec* recorded) {
  Config::check_value("data.test_fraction", cfg.test_fraction);
  if (cfg.train_files.empty()) throw Error("is empty: name the CSV file(s)", "data.train_files");
  const CsvColumns columns = columns_of(cfg);
  const bool classify = columns.class_ids;

  const std::vector<std::string> train_files =
      expand_files(cfg, cfg.train_files, "data.train_files");
  const CsvTable train = read_csv(train_files, columns, "data.train_files");
  Rows train_rows = all_rows(train), held_rows;
  CsvTable test;
  bool separate_test = !cfg.test_files.empty();
  if (separate_test) {
    test =
        read_csv(expand_files(cfg, cfg.test_files, "data.test_files"), columns, "data.test_files");
    if (test.features != train.features)
      throw Error("the test files' feature columns (" + join(test.features) +
                      ") are not the train files' (" + join(train.features) +
                      "); name them with data.feature_columns",
                  "data.test_files");
  } else if (cfg.test_fraction > 0) {
    std::tie(train_rows, held_rows) = split_rows(train, cfg.test_fraction, seed);
    if (train_rows.empty())
      throw Error(
          format("leaves none of the %lld rows for training", static_cast<long long>(train.rows())),
          "data.test_fraction");
  }
  const CsvTable& test_table = separate_test ? test : train;
  const Rows test_rows = separate_test ? all_rows(test) : held_rows;

  DataSpec spec;
  spec.input_shape = {static_cast<int64_t>(train.features.size())};
  std::string what;
  if (classify) {
    int64_t largest = 0;
    for (int64_t r : train_rows)
      largest = std::max(largest, static_cast<int64_t>(train.y[static_cast<size_t>(r)]));
    const LabelSpace space =
        recorded
            ? label_space(cfg, recorded->num_classes, "the run's (preprocess.json)")
            : label_space(
                  cfg, largest + 1,
                  "taken from the train rows (largest class id + 1, as data.num_classes is 0); set "
                  "data.num_classes to cover every class id");
    check_class_ids(train, train_rows, space, train.targets[0]);
    check_class_ids(test_table, test_rows, space, train.targets[0]);
    spec.num_classes = space.classes;
    spec.recipe.class_names = class_names(cfg, space);
    what = format("target '%s', %lld classes (%s)", train.targets[0].c_str(),
                  static_cast<long long>(space.classes),
                  cfg.num_classes > 0 ? "data.num_classes" : "from the train rows");
  } else {
    spec.target_dim = static_cast<int64_t>(train.targets.size());
    std::string names;
    for (const auto& n : train.targets) names += (names.empty() ? "'" : ", '") + n + "'";
    what = "regression target" + std::string(train.targets.size() > 1 ? "s " : " ") + names;
  }

  std::vector<double> mean, stdev;
  if (cfg.normalize && recorded && recorded->recipe.mean.size() == train.features.size()) {
    mean = recorded->recipe.mean, stdev = recorded->recipe.std;  // the run's, not recomputed
  } else if (cfg.normalize) {
    column_stats(train, train_rows, mean, stdev);
    for (size_t j = 0; j < stdev.size(); ++j)
      if (!(stdev[j] > 0))
        throw Error("feature column '" + train.features[j] +
                        "' has the same value in every train row: it "
                        "cannot be standardized; leave it out (data.feature_columns) or set "
                        "data.normalize=false",
                    "data.normalize");
  }
  spec.recipe.feature_names = train.features;
  spec.recipe.target_names = train.targets;
  spec.recipe.mean = mean, spec.recipe.std = stdev;
  Columns tr = tensors_of(train, train_rows, classify, mean, stdev);
  if (classify) warn_empty_classes(tr.targets, spec.num_classes, files_text(train_files));
  const std::string features = join(train.features);
  const std::string scaled = cfg.normalize ? ", standardized per column" : "";
  Splits out;
  out.train = std::make_shared<TensorDataset>(
      tr.inputs, tr.targets, spec,
      format("csv %s (%lld rows, %zu features: %s%s; %s)", files_text(train_files).c_str(),
             static_cast<long long>(train_rows.size()), train.features.size(), features.c_str(),
             scaled.c_str(), what.c_str()));
  if (!test_rows.empty()) {
    Columns te = tensors_of(test_table, test_rows, classify, mean, stdev);
    const std::string from =
        separate_test ? "csv " + files_text(test_table.files)
                      : format("csv: %lld rows held out of the train files (data.test_fraction)",
                               static_cast<long long>(test_rows.size()));
    out.test = std::make_shared<TensorDataset>(
        te.inputs, te.targets, spec,
        format("%s (%lld rows)", from.c_str(), static_cast<long long>(test_rows.size())));
  }
  return out;
}

std::vector<FormatRegistration> csv_formats() {
  FormatRegistration f;
  f.name = DataFormat::kCsv.name();
  f.make_splits = [](const DataConfig& cfg, int64_t seed, const at::Device&) {
    return make_csv_splits(cfg, seed);
  };
  f.recorded_test_split = make_csv_test_split;
  f.preprocess_keys = {{"/input_shape", "data.feature_columns"},
                       {"/input_dtype", "data.csv_task"},
                       {"/task", "data.csv_task"}};
  f.predict_inputs = [](const std::string& path, const DataSpec& spec, const DataConfig&) {
    return csv_inputs(path, spec);
  };
  return {std::move(f)};
}

}  // namespace dtrain::detail
