// data.format cifar10 and cifar100 on small files in the binary version's layout, written here
// from a formula: record i of a file has label(s) from i and pixel (c, y, x) = (7 i + 50 c + 3 y
// + x + salt) mod 256. Shapes, labels and every pixel against the formula; the per-channel
// statistics against the formula's own mean and std (computed here in double); the uint8 path
// (PixelNormalizer) against (x / 255 - mean) / std, and into bf16 channels-last; the classes
// named by the label-name file beside the batches unless data.class_names names them; and each
// malformed file an Error naming the file and the record or byte offset.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "data/pixels.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::message_of;
using test::TempDir;

constexpr int kRecordPlane = 32 * 32, kRecordPixels = 3 * kRecordPlane;

int record_pixel(int i, int c, int y, int x, int salt) {
  return (7 * i + 50 * c + 3 * y + x + salt) % 256;
}

// `labels` records (each record's label bytes given), pixels from the formula with `salt`.
std::vector<unsigned char> records(const std::vector<std::vector<int>>& labels, int salt) {
  std::vector<unsigned char> out;
  for (size_t i = 0; i < labels.size(); ++i) {
    for (int l : labels[i]) out.push_back(static_cast<unsigned char>(l));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x)
          out.push_back(
              static_cast<unsigned char>(record_pixel(static_cast<int>(i), c, y, x, salt)));
  }
  return out;
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// CIFAR-10 labels of record i in batch b: (3 b + i) % 10.
std::vector<std::vector<int>> cifar10_labels(int b, int n) {
  std::vector<std::vector<int>> l;
  for (int i = 0; i < n; ++i) l.push_back({(3 * b + i) % 10});
  return l;
}

// Batches of 3, 2, 2, 2, 1 records (salt = batch) and a test batch of 4 (salt 9) in `dir`.
const std::vector<int> kBatchSizes = {3, 2, 2, 2, 1};
void write_cifar10_files(const std::string& dir) {
  for (int b = 0; b < 5; ++b)
    write_bytes(dir + "/data_batch_" + std::to_string(b + 1) + ".bin",
                records(cifar10_labels(b, kBatchSizes[b]), b));
  write_bytes(dir + "/test_batch.bin", records(cifar10_labels(9, 4), 9));
}

DataConfig cifar_config(const std::string& path, DataFormat format = DataFormat::kCifar10) {
  // The defaults of a config file: no random crops or flips (Note [cifar augmentation]).
  DataConfig cfg =
      Config::from_string(std::string("data: {format: ") + to_string(format) + "}\n").data;
  cfg.path = path;
  cfg.normalize = false;
  return cfg;
}

using dtrain::test::expect_all;

TEST(CifarData, Cifar10ShapesLabelsAndEveryPixel) {
  TempDir dir;
  write_cifar10_files(dir.path());
  const Splits s = make_datasets(cifar_config(dir.path()), 0);
  ASSERT_TRUE(s.train && s.test);
  EXPECT_EQ(s.train->size(), 10);
  EXPECT_EQ(s.test->size(), 4);
  const DataSpec spec = s.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(spec.num_classes, 10);
  // One mean and std per channel; without data.normalize, x / 255 (Note [uint8 pixels]).
  EXPECT_EQ(spec.pixel_mean, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(spec.pixel_std, (std::vector<double>{1, 1, 1}));

  std::vector<int64_t> all(10);
  for (int i = 0; i < 10; ++i) all[static_cast<size_t>(i)] = i;
  const Batch b = s.train->get(all);
  ASSERT_EQ(b.inputs.scalar_type(), at::kByte);
  ASSERT_EQ(b.inputs.sizes().vec(), (std::vector<int64_t>{10, 3, 32, 32}));
  ASSERT_EQ(b.targets.scalar_type(), at::kLong);
  // Samples in file order: batch 1's 3 records, then batch 2's, ...
  int n = 0;
  for (int batch = 0; batch < 5; ++batch)
    for (int i = 0; i < kBatchSizes[static_cast<size_t>(batch)]; ++i, ++n) {
      EXPECT_EQ(b.targets[n].item<int64_t>(), (3 * batch + i) % 10) << "sample " << n;
      const at::Tensor img = b.inputs[n].to(at::kInt);
      const int* p = img.contiguous().data_ptr<int>();
      int wrong = 0;
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x)
            wrong += p[c * kRecordPlane + y * 32 + x] != record_pixel(i, c, y, x, batch);
      EXPECT_EQ(wrong, 0) << "sample " << n;
    }
  const Batch t = s.test->get({3});
  EXPECT_EQ(t.targets[0].item<int64_t>(), (27 + 3) % 10);
  EXPECT_EQ(t.inputs[0][2][31][31].item<int>(), record_pixel(3, 2, 31, 31, 9));
}

TEST(CifarData, StandardizedPerChannelWithTheTrainStatistics) {
  TempDir dir;
  write_cifar10_files(dir.path());
  DataConfig cfg = cifar_config(dir.path());
  cfg.normalize = true;
  const Splits s = make_datasets(cfg, 0);
  const DataSpec spec = s.train->spec();
  ASSERT_EQ(spec.pixel_mean.size(), 3u);
  ASSERT_EQ(spec.pixel_std.size(), 3u);
  // The formula's mean and population std per channel over the 10 train images, in [0, 1].
  for (int c = 0; c < 3; ++c) {
    double sum = 0, sq = 0, count = 0;
    for (int batch = 0; batch < 5; ++batch)
      for (int i = 0; i < kBatchSizes[static_cast<size_t>(batch)]; ++i)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x) sum += record_pixel(i, c, y, x, batch) / 255.0, ++count;
    const double mean = sum / count;
    for (int batch = 0; batch < 5; ++batch)
      for (int i = 0; i < kBatchSizes[static_cast<size_t>(batch)]; ++i)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x)
            sq += std::pow(record_pixel(i, c, y, x, batch) / 255.0 - mean, 2);
    EXPECT_NEAR(spec.pixel_mean[static_cast<size_t>(c)], mean, 1e-12) << "channel " << c;
    EXPECT_NEAR(spec.pixel_std[static_cast<size_t>(c)], std::sqrt(sq / count), 1e-12)
        << "channel " << c;
  }
  // The test split shares the train statistics; the batches stay uint8 and the device path
  // standardizes them: (x / 255 - mean[c]) / std[c].
  EXPECT_EQ(s.test->spec().pixel_mean, spec.pixel_mean);
  const Batch t = s.test->get({1, 2});
  ASSERT_EQ(t.inputs.scalar_type(), at::kByte);
  const at::Tensor z = detail::PixelNormalizer(spec, at::kCPU)(t.inputs);
  ASSERT_EQ(z.scalar_type(), at::kFloat);
  for (int k = 0; k < 2; ++k)
    for (int c = 0; c < 3; ++c)
      for (int yx : {0, 33, 517, 1023}) {
        const int y = yx / 32, x = yx % 32;
        const double want =
            (record_pixel(k + 1, c, y, x, 9) / 255.0 - spec.pixel_mean[static_cast<size_t>(c)]) /
            spec.pixel_std[static_cast<size_t>(c)];
        EXPECT_NEAR(z[k][c][y][x].item<double>(), want, 1e-5) << k << " " << c << " " << yx;
      }
  // Straight into bf16 and channels-last (a ResNet under autocast): the fp32 values rounded
  // once, as autocast would round them.
  const at::Tensor b = detail::PixelNormalizer(spec, at::kCPU)(t.inputs, at::kBFloat16,
                                                               at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(b.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(b.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(b.equal(z.to(at::kBFloat16)));
}

TEST(CifarData, Cifar100FineByDefaultCoarseOnRequest) {
  TempDir dir;
  std::vector<std::vector<int>> train, test;
  for (int i = 0; i < 6; ++i) train.push_back({i % 20, (17 * i + 5) % 100});  // coarse, fine
  for (int i = 0; i < 3; ++i) test.push_back({19 - i, 99 - i});
  write_bytes(dir.file("train.bin"), records(train, 4));
  write_bytes(dir.file("test.bin"), records(test, 8));
  DataConfig cfg = cifar_config(dir.path(), DataFormat::kCifar100);
  Splits s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->spec().num_classes, 100);
  at::Tensor y = s.train->get({0, 1, 2, 3, 4, 5}).targets;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i].item<int64_t>(), (17 * i + 5) % 100);
  EXPECT_EQ(s.test->get({2}).targets[0].item<int64_t>(), 97);
  // The pixels follow the two label bytes.
  EXPECT_EQ(s.train->get({5}).inputs[0][1][2][3].item<int>(), record_pixel(5, 1, 2, 3, 4));

  cfg.cifar_labels = Config::from_string("data: {cifar_labels: coarse}\n").data.cifar_labels;
  s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->spec().num_classes, 20);
  y = s.train->get({0, 1, 2, 3, 4, 5}).targets;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i].item<int64_t>(), i % 20);
  EXPECT_EQ(s.test->get({0}).targets[0].item<int64_t>(), 19);
}

TEST(CifarData, TheArchivesFolderUnderDataPathAndChosenFiles) {
  TempDir dir;
  const std::string sub = dir.file("cifar-10-batches-bin");
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  write_cifar10_files(sub);
  // data.path may be the folder the archive was unpacked in.
  EXPECT_EQ(make_datasets(cifar_config(dir.path()), 0).train->size(), 10);
  // data.train_files / data.test_files pick files (globs), under that folder.
  DataConfig cfg = cifar_config(dir.path());
  cfg.train_files = "data_batch_[12].bin";
  cfg.test_files = "data_batch_5.bin";
  const Splits s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->size(), 3 + 2);
  EXPECT_EQ(s.test->size(), 1);
}

TEST(CifarData, MissingEmptyAndTruncatedFilesNameTheFile) {
  TempDir dir;
  write_cifar10_files(dir.path());
  const DataConfig cfg = cifar_config(dir.path());

  ASSERT_EQ(::remove(dir.file("data_batch_3.bin").c_str()), 0);
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {"data.path", "file not found", dir.file("data_batch_3.bin"), "data_batch_1.bin",
              "test_batch.bin"});

  write_bytes(dir.file("data_batch_3.bin"), {});
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("data_batch_3.bin"), "empty file"});

  // Two whole records and 100 bytes of a third: record 2 at byte offset 2 x 3073.
  std::vector<unsigned char> cut = records(cifar10_labels(2, 3), 2);
  cut.resize(2 * 3073 + 100);
  write_bytes(dir.file("data_batch_3.bin"), cut);
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("data_batch_3.bin"), "not a whole number of 3073-byte CIFAR-10 records",
              "record 2, at byte offset 6146, is truncated to 100 bytes"});

  // A CIFAR-100 file read as CIFAR-10: its size says which it is.
  write_bytes(dir.file("data_batch_3.bin"), records({{1, 2}, {3, 4}, {5, 6}}, 0));
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("data_batch_3.bin"), "3074-byte records", "data.format cifar100"});

  // A test split whose file is missing.
  write_cifar10_files(dir.path());
  ASSERT_EQ(::remove(dir.file("test_batch.bin").c_str()), 0);
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("test_batch.bin"), "file not found"});
  DataConfig named = cfg;
  named.test_files = "missing_*.bin";
  expect_all(message_of([&] { make_datasets(named, 0); }), {"data.test_files", "no file matches"});
}

TEST(CifarData, LabelOutsideTheClassesNamesFileRecordAndOffset) {
  TempDir dir;
  write_cifar10_files(dir.path());
  // Record 1 of data_batch_4.bin has label 10: CIFAR-10 has classes 0..9.
  write_bytes(dir.file("data_batch_4.bin"), records({{2}, {10}}, 3));
  DataConfig cfg = cifar_config(dir.path());
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("data_batch_4.bin"), "label 10 of record 1 (label at byte offset 3073)",
              "[0, 10)", "CIFAR-10 has 10 classes"});
  // data.num_classes narrows the classes: every label is checked against it. Batches 1 and 2
  // hold labels 0..4; record 0 of batch 3 has label 6.
  write_cifar10_files(dir.path());
  cfg.num_classes = 5;
  expect_all(message_of([&] { make_datasets(cfg, 0); }),
             {dir.file("data_batch_3.bin"), "label 6 of record 0 (label at byte offset 0)",
              "[0, 5)", "data.num_classes"});
  // A fine label of 100 in CIFAR-100 (byte 1 of the record).
  write_bytes(dir.file("train.bin"), records({{0, 1}, {1, 2}, {2, 100}}, 0));
  write_bytes(dir.file("test.bin"), records({{0, 1}}, 0));
  cfg = cifar_config(dir.path(), DataFormat::kCifar100);
  expect_all(
      message_of([&] { make_datasets(cfg, 0); }),
      {dir.file("train.bin"), "label 100 of record 2 (label at byte offset 6149)", "[0, 100)"});
}

TEST(CifarData, TheLabelNameFileNamesTheClassesUnlessTheConfigDoes) {
  TempDir dir;
  const std::string sub = dir.file("cifar-10-batches-bin");
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  write_cifar10_files(sub);
  // No batches.meta.txt: no names.
  EXPECT_TRUE(make_datasets(cifar_config(dir.path()), 0).train->spec().recipe.class_names.empty());
  // As the binary archive ships it: one name a line, then blank lines.
  const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                          "dog",      "frog",       "horse", "ship", "truck"};
  std::string text;
  for (const auto& n : names) text += n + "\n";
  write_bytes(sub + "/batches.meta.txt", std::vector<unsigned char>(text.begin(), text.end()));
  { std::ofstream(sub + "/batches.meta.txt", std::ios::app) << "\n \n"; }
  DataConfig cfg = cifar_config(dir.path());
  Splits s = make_datasets(cfg, 0);
  EXPECT_EQ(s.train->spec().recipe.class_names, names);
  EXPECT_EQ(s.test->spec().recipe.class_names, names);
  // dtrain eval's test split reads them too.
  EXPECT_EQ(detail::make_recorded_test_split(cfg, s.train->spec(), 0, at::kCPU)
                ->spec()
                .recipe.class_names,
            names);
  // data.class_names wins, and is held to the classes.
  cfg.class_names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  EXPECT_EQ(make_datasets(cfg, 0).train->spec().recipe.class_names, cfg.class_names);
  cfg.class_names.pop_back();
  expect_all(
      message_of([&] { make_datasets(cfg, 0); }),
      {"data.class_names", "gives 9 names for the model's 10 classes", "CIFAR-10 has 10 classes"});
  // A file that does not name every class is not used (a warning names it).
  cfg.class_names.clear();
  write_bytes(sub + "/batches.meta.txt", std::vector<unsigned char>{'c', 'a', 't', '\n'});
  EXPECT_TRUE(make_datasets(cfg, 0).train->spec().recipe.class_names.empty());
}

TEST(CifarData, Cifar100NamesFineOrCoarseLabelsByTheirFiles) {
  TempDir dir;
  write_bytes(dir.file("train.bin"), records({{0, 1}, {1, 2}}, 0));
  write_bytes(dir.file("test.bin"), records({{0, 1}}, 0));
  std::string fine, coarse;
  for (int i = 0; i < 100; ++i) fine += "fine" + std::to_string(i) + "\n";
  for (int i = 0; i < 20; ++i) coarse += "coarse" + std::to_string(i) + "\r\n";  // CRs dropped
  write_bytes(dir.file("fine_label_names.txt"),
              std::vector<unsigned char>(fine.begin(), fine.end()));
  write_bytes(dir.file("coarse_label_names.txt"),
              std::vector<unsigned char>(coarse.begin(), coarse.end()));
  DataConfig cfg = cifar_config(dir.path(), DataFormat::kCifar100);
  const auto fine_names = make_datasets(cfg, 0).train->spec().recipe.class_names;
  ASSERT_EQ(fine_names.size(), 100u);
  EXPECT_EQ(fine_names[0], "fine0");
  EXPECT_EQ(fine_names[99], "fine99");
  cfg.cifar_labels = Config::from_string("data: {cifar_labels: coarse}\n").data.cifar_labels;
  const auto coarse_names = make_datasets(cfg, 0).train->spec().recipe.class_names;
  ASSERT_EQ(coarse_names.size(), 20u);
  EXPECT_EQ(coarse_names[19], "coarse19");
}

}  // namespace
}  // namespace dtrain
