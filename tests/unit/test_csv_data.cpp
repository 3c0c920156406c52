// data.format csv on small files written here: features and targets by column name, the
// per-column standardization against the mean and std computed here, the seeded held-out rows,
// separate test files, and every malformed file an Error naming file:line (and :column).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::message_of;
using test::TempDir;

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

using dtrain::test::expect_all;

DataConfig csv_config(const TempDir& dir, const std::string& train, const std::string& targets) {
  DataConfig cfg = Config::from_string("data: {format: csv}\n").data;
  cfg.path = dir.path();
  cfg.train_files = train;
  cfg.target_columns = targets;
  cfg.normalize = false;
  cfg.test_fraction = 0;
  return cfg;
}

CsvTask task(const std::string& name) {
  return Config::from_string("data: {csv_task: " + name + "}\n").data.csv_task;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Row i: x = i / 2, y = 10 - i, label = i % 3 (rows 0..n-1).
std::string rows_text(int n, const std::string& header = "x,label,y\n") {
  std::string s = header;
  for (int i = 0; i < n; ++i)
    s +=
        std::to_string(i / 2.0) + "," + std::to_string(i % 3) + "," + std::to_string(10 - i) + "\n";
  return s;
}

TEST(CsvData, ClassificationColumnsByName) {
  TempDir dir;
  write(dir.file("train.csv"), rows_text(8));
  const Splits s = make_datasets(csv_config(dir, "train.csv", "label"), 0);
  ASSERT_TRUE(s.train);
  EXPECT_FALSE(s.test);  // data.test_fraction 0, no data.test_files
  const DataSpec spec = s.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{2}));  // x, y
  EXPECT_EQ(spec.num_classes, 3);                          // largest class id + 1
  EXPECT_EQ(spec.target_dim, 0);
  const Batch b = s.train->get(iota(8));
  ASSERT_EQ(b.inputs.scalar_type(), at::kFloat);
  ASSERT_EQ(b.targets.scalar_type(), at::kLong);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(b.inputs[i][0].item<double>(), i / 2.0);
    EXPECT_EQ(b.inputs[i][1].item<double>(), 10 - i);
    EXPECT_EQ(b.targets[i].item<int64_t>(), i % 3);
  }
  EXPECT_NE(s.train->describe().find("2 features: x, y"), std::string::npos) << s.train->describe();
}

TEST(CsvData, FeatureColumnsPickAndOrder) {
  TempDir dir;
  write(dir.file("t.csv"), "id,name,b,a,t\n1,\"Smith, J\",2.5,-1,0\n2,Jones,3.5,-2,1\n");
  DataConfig cfg = csv_config(dir, "t.csv", "t");
  cfg.feature_columns = "a, b";  // the quoted text column is not read
  const Batch b = make_datasets(cfg, 0).train->get({0, 1});
  EXPECT_TRUE(b.inputs.equal(at::tensor({-1.0f, 2.5f, -2.0f, 3.5f}).reshape({2, 2})));
  EXPECT_TRUE(b.targets.equal(at::tensor({0, 1}, at::kLong)));
}

TEST(CsvData, RegressionWithSeveralTargets) {
  TempDir dir;
  // CRLF line ends, a byte-order mark, blank lines and spaces around fields are accepted.
  write(dir.file("r.csv"), "\xEF\xBB\xBFu, v ,w\r\n1,2,3\r\n\r\n 4 , 5,6e1\r\n7,8,9\r\n");
  DataConfig cfg = csv_config(dir, "r.csv", "w,u");
  cfg.csv_task = task("regression");
  const Splits s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->spec().num_classes, 0);
  EXPECT_EQ(s.train->spec().target_dim, 2);
  const Batch b = s.train->get({0, 1, 2});
  EXPECT_TRUE(b.inputs.equal(at::tensor({2.0f, 5.0f, 8.0f}).reshape({3, 1})));
  EXPECT_TRUE(b.targets.equal(at::tensor({3.0f, 1.0f, 60.0f, 4.0f, 9.0f, 7.0f}).reshape({3, 2})));
}

TEST(CsvData, StandardizedPerColumnWithTheTrainStatistics) {
  TempDir dir;
  write(dir.file("train.csv"), rows_text(8));
  write(dir.file("test.csv"), rows_text(3));
  DataConfig cfg = csv_config(dir, "train.csv", "label");
  cfg.test_files = "test.csv";
  cfg.normalize = true;
  const Splits s = make_datasets(cfg, 0);
  // Column x over the train rows: i / 2; column y: 10 - i (population std).
  auto stats = [](auto f) {
    double m = 0, v = 0;
    for (int i = 0; i < 8; ++i) m += f(i) / 8.0;
    for (int i = 0; i < 8; ++i) v += std::pow(f(i) - m, 2) / 8.0;
    return std::make_pair(m, std::sqrt(v));
  };
  const auto [mx, sx] = stats([](int i) { return i / 2.0; });
  const auto [my, sy] = stats([](int i) { return 10.0 - i; });
  const Batch tr = s.train->get(iota(8));
  const Batch te = s.test->get(iota(3));
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(tr.inputs[i][0].item<double>(), (i / 2.0 - mx) / sx, 1e-6);
    EXPECT_NEAR(tr.inputs[i][1].item<double>(), (10.0 - i - my) / sy, 1e-6);
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(te.inputs[i][1].item<double>(), (10.0 - i - my) / sy, 1e-6);
}

TEST(CsvData, HeldOutRowsAreSeededAndDisjoint) {
  TempDir dir;
  std::string text = "f,label\n";
  for (int i = 0; i < 100; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  write(dir.file("d.csv"), text);
  DataConfig cfg = csv_config(dir, "d.csv", "label");
  cfg.test_fraction = 0.2;
  auto rows = [&](int64_t seed) {
    const Splits s = make_datasets(cfg, seed);
    std::vector<int64_t> train, test;
    const at::Tensor a = s.train->get(iota(s.train->size())).inputs.reshape({-1});
    const at::Tensor b = s.test->get(iota(s.test->size())).inputs.reshape({-1});
    for (int64_t i = 0; i < a.numel(); ++i) train.push_back(a[i].item<int64_t>());
    for (int64_t i = 0; i < b.numel(); ++i) test.push_back(b[i].item<int64_t>());
    return std::make_pair(train, test);
  };
  const auto [train, test] = rows(5);
  EXPECT_EQ(train.size(), 80u);
  EXPECT_EQ(test.size(), 20u);
  std::set<int64_t> all(train.begin(), train.end());
  all.insert(test.begin(), test.end());
  EXPECT_EQ(all.size(), 100u);                            // disjoint, every row once
  EXPECT_TRUE(std::is_sorted(test.begin(), test.end()));  // in file order
  EXPECT_EQ(rows(5).second, test);  // the same seed holds out the same rows (every rank alike)
  EXPECT_NE(rows(6).second, test);
}

TEST(CsvData, MalformedFilesNameFileLineAndColumn) {
  TempDir dir;
  const std::string f = dir.file("bad.csv");
  auto error_for = [&](const std::string& text, const std::string& targets = "label") {
    write(f, text);
    return message_of([&] { make_datasets(csv_config(dir, "bad.csv", targets), 0); });
  };
  expect_all(error_for(""), {f, "empty file"});
  expect_all(error_for("\n \n"), {f, "only blank lines"});
  expect_all(error_for("x,label\n"), {f, "no data rows after the header (line 1)"});
  expect_all(error_for("x,label\n1,0\n", "target"), {"data.target_columns", "no column 'target'",
                                                     "the columns of " + f + " are: x, label"});
  expect_all(error_for("x,y\n1,0\n", ""), {"data.target_columns", "is empty"});
  expect_all(error_for("x,label\n1,0\n2,1\n3,abc\n"),
             {f + ":4:2", "column 2 'label'", "'abc' is not a number"});
  expect_all(error_for("x,label\n1,0\n1.5e,1\n"),
             {f + ":3:1", "column 1 'x'", "'1.5e' is not a number"});
  expect_all(error_for("x,label\n1,0\nnan,1\n"), {f + ":3:1", "'nan' is not a finite number"});
  expect_all(error_for("x,label\n1,0\n,1\n"), {f + ":3:1", "empty field"});
  expect_all(error_for("x,label\n1,0\n\n2,1,7\n"),
             {f + ":4", "3 field(s), the header has 2 columns"});
  expect_all(error_for("x,label\n1\n"), {f + ":2", "1 field(s), the header has 2 columns"});
  expect_all(error_for("x,label\n1,-1\n"), {f + ":2:2", "class id -1 is negative"});
  expect_all(error_for("x,label\n1,2.5\n"), {f + ":2:2", "class id 2.5 is not a whole number"});
  expect_all(error_for("x,x,label\n1,2,0\n"), {f + ":1:2", "names column 'x' twice"});
  expect_all(error_for("x,\"label\n1,0\n"), {f + ":1", "not closed"});
  // A class id written 2.0 is the whole number 2.
  write(f, "x,label\n1,2.0\n2,0\n");
  EXPECT_EQ(make_datasets(csv_config(dir, "bad.csv", "label"), 0).train->spec().num_classes, 3);
}

TEST(CsvData, ClassIdsOutsideTheClassesNameTheLine) {
  TempDir dir;
  write(dir.file("train.csv"), "x,label\n1,0\n2,1\n3,2\n");
  write(dir.file("test.csv"), "x,label\n1,0\n2,5\n3,7\n");
  DataConfig cfg = csv_config(dir, "train.csv", "label");
  cfg.test_files = "test.csv";
  // The train rows give 3 classes; test line 3 has class id 5.
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("test.csv") + ":3", "label 5 of column 'label'", "2 such label(s)", "[0, 3)",
              "from the train rows", "data.num_classes"});
  cfg.num_classes = 8;
  EXPECT_EQ(make_datasets(cfg, 0).test->spec().num_classes, 8);
  cfg.num_classes = 2;
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("train.csv") + ":4", "label 2", "[0, 2)", "set by data.num_classes"});
}

TEST(CsvData, ColumnsAndSettingsThatDoNotFit) {
  TempDir dir;
  write(dir.file("a.csv"), "x,label\n1,0\n2,1\n");
  write(dir.file("b.csv"), "label,x\n1,0\n");
  write(dir.file("c.csv"), "x,y,label\n1,5,0\n2,5,1\n");
  DataConfig cfg = csv_config(dir, "a.csv,b.csv", "label");
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("b.csv") + ":1", "header differs", "x, label"});
  cfg = csv_config(dir, "a.csv", "label,x");
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {"data.target_columns", "classification takes one column"});
  cfg.csv_task = task("regression");
  expect_all(message_of([&] { make_datasets(cfg, 0); }), {"no feature columns"});
  cfg = csv_config(dir, "c.csv", "label");
  cfg.feature_columns = "x,label";
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {"data.feature_columns", "'label' is both"});
  cfg.feature_columns = "";
  cfg.normalize = true;  // column y is 5 in every row
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {"data.normalize", "'y'", "same value in every train row"});
  cfg = csv_config(dir, "nothing*.csv", "label");
  expect_all(message_of([&] { make_datasets(cfg, 0); }), {"data.train_files", "no file matches"});
  cfg = csv_config(dir, "c.csv", "label");
  cfg.test_files = "a.csv";  // no column y
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {"data.test_files", "are not the train files'"});
}

}  // namespace
}  // namespace dtrain
