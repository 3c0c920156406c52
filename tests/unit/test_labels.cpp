// The label rule of classification data: data.num_classes (0 = the train labels' largest + 1)
// sets the model's classes, and every train and test label must lie in [0, num_classes); one
// that does not is an Error naming the file, the sample index and the label. Small IDX files
// written here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace {

using dtrain::test::message_of;
using dtrain::test::TempDir;
using dtrain::test::write_gzip;

// An IDX uint8 file of `dims` (big-endian uint32 each) holding `data`.
std::vector<unsigned char> idx_u8(const std::vector<uint32_t>& dims,
                                  const std::vector<unsigned char>& data) {
  std::vector<unsigned char> out = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<unsigned char>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// IDX files for len(train) train and len(test) test 1x2 images with these labels.
dtrain::DataConfig write_split(const TempDir& dir, const std::vector<unsigned char>& train,
                               const std::vector<unsigned char>& test) {
  auto images = [](size_t n) {
    std::vector<unsigned char> px;
    for (size_t i = 0; i < 2 * n; ++i) px.push_back(static_cast<unsigned char>(i * 40));
    return px;
  };
  const auto n = static_cast<uint32_t>(train.size()), m = static_cast<uint32_t>(test.size());
  write_gzip(dir.file("tr-img.gz"), idx_u8({n, 1, 2}, images(n)));
  write_gzip(dir.file("tr-lab.gz"), idx_u8({n}, train));
  write_gzip(dir.file("te-img.gz"), idx_u8({m, 1, 2}, images(m)));
  write_gzip(dir.file("te-lab.gz"), idx_u8({m}, test));
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kIdx;
  cfg.path = dir.path();
  cfg.train_images = "tr-img.gz";
  cfg.train_labels = "tr-lab.gz";
  cfg.test_images = "te-img.gz";
  cfg.test_labels = "te-lab.gz";
  cfg.normalize = false;
  return cfg;
}

using dtrain::test::expect_all;

TEST(Labels, ClassesFromTheTrainLabelsByDefault) {
  TempDir dir;
  auto cfg = write_split(dir, {0, 4, 2, 1}, {4, 0});
  auto splits = dtrain::make_datasets(cfg, 0);
  EXPECT_EQ(splits.train->spec().num_classes, 4 + 1);  // largest train label + 1
  EXPECT_EQ(splits.test->spec().num_classes, 4 + 1);
  EXPECT_NE(splits.train->describe().find("5 classes (from the train labels)"), std::string::npos)
      << splits.train->describe();
}

TEST(Labels, NumClassesSetsTheClasses) {
  TempDir dir;
  auto cfg = write_split(dir, {0, 4, 2, 1}, {4, 6});
  cfg.num_classes = 7;
  auto splits = dtrain::make_datasets(cfg, 0);
  EXPECT_EQ(splits.train->spec().num_classes, 7);
  EXPECT_EQ(splits.test->spec().num_classes, 7);
  EXPECT_NE(splits.train->describe().find("7 classes (data.num_classes)"), std::string::npos);
}

TEST(Labels, TrainLabelBeyondNumClassesNamesFileSampleAndValue) {
  TempDir dir;
  auto cfg = write_split(dir, {0, 1, 200, 3, 250}, {0});
  cfg.num_classes = 10;
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {dir.file("tr-lab.gz"), "label 200 of sample 2", "2 such label(s)", "[0, 10)",
              "data.num_classes"});
}

TEST(Labels, TestLabelBeyondTheTrainLabelsClassesIsAnError) {
  TempDir dir;
  // Train labels 0..3 give 4 classes; test sample 1 has label 7, which no output could predict.
  auto cfg = write_split(dir, {0, 1, 2, 3}, {3, 7, 2});
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {dir.file("te-lab.gz"), "label 7 of sample 1", "[0, 4)", "from the train labels",
              "data.num_classes"});
  // Naming the classes fixes it.
  cfg.num_classes = 8;
  EXPECT_EQ(dtrain::make_datasets(cfg, 0).test->spec().num_classes, 8);
}

TEST(Labels, ClassesFromTheTrainLabelsCoverTheLargest) {
  // With data.num_classes 0 a train label of 200 makes 200 + 1 classes (and a warning that 198
  // of them have no training sample); data.num_classes is how to bound them.
  TempDir dir;
  auto cfg = write_split(dir, {0, 200}, {0});
  auto splits = dtrain::make_datasets(cfg, 0);
  EXPECT_EQ(splits.train->spec().num_classes, 201);
}

TEST(Labels, SyntheticDataDisagreeingWithNumClassesIsAnError) {
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kSynthetic;
  cfg.synthetic_task = dtrain::test::task_of("classification");
  cfg.synthetic_size = 16;
  cfg.synthetic_test_size = 0;
  cfg.synthetic_classes = 4;
  cfg.num_classes = 3;
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.num_classes", "is 3", "data.synthetic_classes = 4"});
  cfg.num_classes = 4;
  EXPECT_EQ(dtrain::make_datasets(cfg, 0).train->spec().num_classes, 4);
  cfg.synthetic_task = dtrain::test::task_of("regression");
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.num_classes", "has no classes"});
}

}  // namespace
