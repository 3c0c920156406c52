// data.format image_folder (Note [image transforms]): torchvision's ImageFolder layout (sorted
// classes, sorted files, other files skipped and counted), training and evaluation pixels equal
// to torchvision's transforms on PIL's images (computed by PIL), crops keyed by (seed, epoch,
// index) and the epoch carried from the plan through the loader, the keys, and every bad folder
// or file an error naming it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <numeric>
#include <string>
#include <vector>

#include "data/images/image_transforms.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/loader.h"
#include "image_reference.h"
#include "test_support.h"
#include "train/plan.h"
#include "util/fs.h"

namespace {

using dtrain::DataConfig;
using dtrain::detail::random_resized_crop;
using dtrain::detail::SampleRandom;
using dtrain::test::ImageReference;
using dtrain::test::max_difference;
using dtrain::test::mean_difference;
using dtrain::test::message_of;
using dtrain::test::read_bytes;
using dtrain::test::TempDir;
using dtrain::test::write_bytes;

constexpr int64_t kSeed = 17;

// `to` (under root) as a copy of the reference image `from`, folders made as needed.
void put(const std::string& root, const std::string& to, const std::string& from) {
  const std::string path = root + "/" + to;
  dtrain::detail::make_dirs(path.substr(0, path.rfind('/')));
  write_bytes(path, from.empty() ? std::vector<uint8_t>{'n', 'o', 't', 'e'}
                                 : read_bytes(ImageReference::get().path(from)));
}

DataConfig folder_config(const std::string& path) {
  DataConfig c;
  c.format = dtrain::DataFormat::kImageFolder;
  c.path = path;
  c.image_size = 32;
  c.resize = 40;
  c.scaled_decode = false;
  return c;
}

std::vector<int64_t> all(const dtrain::Dataset& d) {
  std::vector<int64_t> v(static_cast<size_t>(d.size()));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<uint8_t> row(const at::Tensor& inputs, int64_t k) {
  const at::Tensor r = inputs[k].contiguous();
  return std::vector<uint8_t>(r.data_ptr<uint8_t>(), r.data_ptr<uint8_t>() + r.numel());
}

// The layout of torchvision's ImageFolder docs, with the corners it handles: a nested folder,
// upper-case extensions, files without an image extension; a test folder with fewer classes.
struct Layout {
  TempDir dir;
  // The training files in the order ImageFolder lists them, with the reference image of each.
  std::vector<std::pair<std::string, std::string>> train = {
      {"train/a_cls/img.PNG", "gray.png"},
      {"train/b_cls/x.jpg", "rgb.jpg"},
      {"train/b_cls/y.png", "rgb.png"},
      {"train/c_cls/top.png", "palette.png"},
      {"train/c_cls/sub/deep.jpeg", "progressive.jpg"}};
  std::vector<int64_t> train_labels = {0, 1, 1, 2, 2};
  std::vector<std::pair<std::string, std::string>> test = {{"val/a_cls/w.jpg", "gray.jpg"},
                                                           {"val/c_cls/v.png", "rgb.png"}};
  std::vector<int64_t> test_labels = {0, 2};
  Layout() {
    for (const auto& [to, from] : train) put(dir.path(), to, from);
    for (const auto& [to, from] : test) put(dir.path(), to, from);
    put(dir.path(), "train/b_cls/notes.txt", "");
    put(dir.path(), "train/c_cls/README", "");
  }
};

TEST(ImageFolder, ClassesAreSortedFoldersAndEvaluationIsResizeAndCenterCrop) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  Layout l;
  const auto splits = dtrain::make_datasets(folder_config(l.dir.path()), kSeed);
  ASSERT_TRUE(splits.train && splits.test);
  EXPECT_EQ(splits.train->size(), 5);
  const std::string d = splits.train->describe();
  EXPECT_NE(d.find("5 images of 3 classes"), std::string::npos) << d;
  EXPECT_NE(d.find("(2 other files skipped)"), std::string::npos) << d;
  const auto spec = splits.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(spec.num_classes, 3);
  EXPECT_EQ(spec.input_dtype, at::kFloat);
  EXPECT_EQ(spec.pixel_mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(spec.pixel_std, (std::vector<double>{0.229, 0.224, 0.225}));
  const dtrain::Batch b = splits.train->get(all(*splits.train));
  EXPECT_EQ(b.inputs.scalar_type(), at::kByte);
  EXPECT_EQ(b.inputs.sizes(), (at::IntArrayRef{5, 3, 32, 32}));
  EXPECT_EQ(std::vector<int64_t>(b.targets.data_ptr<int64_t>(), b.targets.data_ptr<int64_t>() + 5),
            l.train_labels);
  // The test folder's classes by name: c_cls keeps label 2 although a_cls is the only other.
  const dtrain::Batch t = splits.test->fetch(all(*splits.test), 3, false);
  EXPECT_EQ(std::vector<int64_t>(t.targets.data_ptr<int64_t>(), t.targets.data_ptr<int64_t>() + 2),
            l.test_labels);
  std::vector<std::string> jobs;
  for (const auto& [to, from] : l.test) jobs.push_back("eval " + l.dir.file(to) + " 40 32");
  const auto pil = ref.run(jobs);
  for (size_t k = 0; k < l.test.size(); ++k) {
    SCOPED_TRACE(l.test[k].first);
    EXPECT_LE(max_difference(row(t.inputs, static_cast<int64_t>(k)), pil[k]), 1);
  }
  // Evaluation draws nothing: every epoch gives the same pixels.
  EXPECT_TRUE(splits.test->fetch(all(*splits.test), 0, false).inputs.equal(t.inputs));
  // data.normalize false: pixels / 255 only.
  auto raw = folder_config(l.dir.path());
  raw.normalize = false;
  EXPECT_EQ(dtrain::make_datasets(raw, kSeed).train->spec().pixel_std,
            (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(dtrain::make_datasets(raw, kSeed).train->spec().pixel_mean,
            (std::vector<double>{0, 0, 0}));
}

TEST(ImageFolder, TrainingCropsAndFlipsAreTorchvisionsOnPilsPixels) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  Layout l;
  const DataConfig cfg = folder_config(l.dir.path());
  const auto train = dtrain::make_datasets(cfg, kSeed).train;
  const int64_t epoch = 3;
  const dtrain::Batch b = train->fetch(all(*train), epoch, false);
  std::vector<std::string> jobs;
  for (size_t i = 0; i < l.train.size(); ++i) {
    // The draws of Note [image transforms]: the crop, then the flip, from (seed, epoch, index).
    const auto [w, h] = ref.size(l.train[i].second);
    SampleRandom random(kSeed, epoch, static_cast<int64_t>(i));
    const auto c = random_resized_crop(w, h, cfg.crop_scale, cfg.crop_ratio, random);
    const bool flip = random.uniform(0, 1) < 0.5;
    jobs.push_back("crop " + l.dir.file(l.train[i].first) + " " + std::to_string(c.top) + " " +
                   std::to_string(c.left) + " " + std::to_string(c.height) + " " +
                   std::to_string(c.width) + " 32 " + (flip ? "1" : "0"));
  }
  const auto pil = ref.run(jobs);
  for (size_t i = 0; i < l.train.size(); ++i) {
    SCOPED_TRACE(jobs[i]);
    EXPECT_LE(max_difference(row(b.inputs, static_cast<int64_t>(i)), pil[i]), 1);
  }
}

TEST(ImageFolder, DrawsDependOnSeedEpochAndIndexOnly) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  Layout l;
  const auto cfg = folder_config(l.dir.path());
  const auto train = dtrain::make_datasets(cfg, kSeed).train;
  const at::Tensor e1 = train->fetch(all(*train), 1, false).inputs;
  EXPECT_TRUE(train->fetch(all(*train), 1, false).inputs.equal(e1));
  // A sample's pixels do not depend on the batch it is in, or its place there.
  const at::Tensor pair = train->fetch({4, 2}, 1, false).inputs;
  EXPECT_TRUE(pair[0].equal(e1[4]));
  EXPECT_TRUE(pair[1].equal(e1[2]));
  int other_epoch = 0, other_seed = 0;
  const at::Tensor e2 = train->fetch(all(*train), 2, false).inputs;
  const at::Tensor s2 =
      dtrain::make_datasets(cfg, kSeed + 1).train->fetch(all(*train), 1, false).inputs;
  for (int64_t i = 0; i < 5; ++i)
    other_epoch += !e2[i].equal(e1[i]), other_seed += !s2[i].equal(e1[i]);
  EXPECT_GE(other_epoch, 4);
  EXPECT_GE(other_seed, 4);
}

TEST(ImageFolder, HalfTheCropsAreFlipped) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  TempDir dir;
  put(dir.path(), "train/only/a.png", "rgb.png");  // 97 x 61
  auto cfg = folder_config(dir.path());
  cfg.test_dir = "";
  // The whole image every time: scale 1, the image's own aspect ratio.
  cfg.crop_scale = {1.0, 1.0};
  cfg.crop_ratio = {97.0 / 61.0, 97.0 / 61.0};
  const auto train = dtrain::make_datasets(cfg, kSeed).train;
  const std::string file = dir.file("train/only/a.png");
  const auto pil = ImageReference::get().run(
      {"crop " + file + " 0 0 61 97 32 0", "crop " + file + " 0 0 61 97 32 1"});
  int flipped = 0;
  const int n = 400;
  for (int64_t epoch = 0; epoch < n; ++epoch) {
    const auto px = row(train->fetch({0}, epoch, false).inputs, 0);
    ASSERT_TRUE(px == pil[0] || px == pil[1]) << "epoch " << epoch;
    flipped += px == pil[1];
  }
  // Binomial(400, 1/2): mean 200, std 10; within 5 of those.
  EXPECT_NEAR(flipped, 200, 50);
}

TEST(ImageFolder, ScaledDecodingStaysCloseToAFullDecode) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  TempDir dir;
  put(dir.path(), "train/a/big.jpg", "big.jpg");  // 403 x 301
  put(dir.path(), "val/a/big.jpg", "big.jpg");
  auto cfg = folder_config(dir.path());
  cfg.image_size = 32, cfg.resize = 37;  // evaluation decodes at 1/8 (301 / 8 = 37.6 >= 37)
  cfg.crop_scale = {0.5, 1.0};           // training crops of 200 pixels or more: 1/4 or less
  cfg.scaled_decode = true;
  const auto scaled = dtrain::make_datasets(cfg, kSeed);
  cfg.scaled_decode = false;
  const auto full = dtrain::make_datasets(cfg, kSeed);
  const std::string file = dir.file("val/a/big.jpg");
  const auto pil = ref.run({"eval " + file + " 37 32"});
  EXPECT_LE(max_difference(row(full.test->get({0}).inputs, 0), pil[0]), 1);
  // The DCT's shrinking instead of PIL's filter: a few levels on average on this smooth noise.
  const auto eval = row(scaled.test->get({0}).inputs, 0);
  EXPECT_LT(mean_difference(eval, pil[0]), 4.0);
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    SCOPED_TRACE(epoch);
    const auto a = row(scaled.train->fetch({0}, epoch, false).inputs, 0);
    const auto b = row(full.train->fetch({0}, epoch, false).inputs, 0);
    EXPECT_NE(a, b);  // decoded smaller, so not the same bytes
    EXPECT_LT(mean_difference(a, b), 4.0);
  }
}

TEST(ImageFolder, TheLoaderPassesEachBatchItsEpoch) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  Layout l;
  const auto train = dtrain::make_datasets(folder_config(l.dir.path()), kSeed).train;
  dtrain::LoaderOptions o;
  o.workers = 2;
  o.prefetch = 2;
  dtrain::Loader loader(train, {{0, 1, 2}, {0, 1, 2}, {3, 4}}, o, {0, 1, 1});
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> expected = {
      {{0, 1, 2}, 0}, {{0, 1, 2}, 1}, {{3, 4}, 1}};
  for (const auto& [indices, epoch] : expected) {
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(b->inputs.equal(train->fetch(indices, epoch, false).inputs)) << "epoch " << epoch;
  }
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_NE(message_of([&] { dtrain::Loader bad(train, {{0}, {1}}, o, {0}); }), "NO EXCEPTION");
}

TEST(ImageFolder, ThePlanGivesEachBatchItsEpoch) {
  dtrain::Config c;
  c.train.global_batch = 4;
  c.train.epochs = 3;
  c.resolve(2);
  // 10 samples over 2 ranks: 5 each, 2 full batches of 2 per epoch (drop_last).
  const auto plan = dtrain::detail::plan_steps(c, 10, 2, 1, /*first_step=*/1);
  ASSERT_EQ(plan.batches.size(), plan.epochs.size());
  EXPECT_EQ(plan.epochs, (std::vector<int64_t>{0, 1, 1, 2, 2}));
}

TEST(ImageFolder, BadFoldersAndFilesAreErrorsNamingThem) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  auto expect_all = [](const std::string& m, const std::vector<std::string>& parts) {
    for (const auto& p : parts)
      EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' in: " << m;
  };
  TempDir dir;
  auto cfg = folder_config(dir.path());
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.train_dir", dir.file("train"), "no folder"});
  put(dir.path(), "train/loose.png", "rgb.png");
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.train_dir", "holds no class folders"});
  put(dir.path(), "train/b/x.png", "rgb.png");
  put(dir.path(), "train/a/readme.txt", "");
  expect_all(
      message_of([&] { dtrain::make_datasets(cfg, 0); }),
      {"data.train_dir", dir.file("train/a"), "without a .jpg, .jpeg or .png file (1 other file)"});
  put(dir.path(), "train/a/y.jpg", "rgb.jpg");
  put(dir.path(), "val/z/y.jpg", "rgb.jpg");
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.test_dir", dir.file("val/z"), "does not have"});
  cfg.test_dir = "";
  cfg.num_classes = 1;
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.num_classes", "holds 2 class folders"});
  cfg.num_classes = 5;  // more outputs than folders: allowed
  EXPECT_EQ(dtrain::make_datasets(cfg, 0).train->spec().num_classes, 5);
  cfg.num_classes = 0;
  cfg.resize = 20;
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }),
             {"data.resize", "smaller than the crop"});
  cfg.resize = 0;
  expect_all(message_of([&] { dtrain::make_datasets(cfg, 0); }), {"data.resize", "is 0"});
  cfg.resize = 40;
  // Damaged files are found when their batch is read: the error names the file.
  const std::vector<uint8_t> jpeg = read_bytes(ref.path("big.jpg"));
  write_bytes(dir.file("train/b/z_cut.jpg"),
              std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 5000));
  write_bytes(dir.file("train/b/z_text.png"), {'n', 'o'});
  const auto train = dtrain::make_datasets(cfg, 0).train;
  ASSERT_EQ(train->size(), 4);  // a/y.jpg, b/x.png, b/z_cut.jpg, b/z_text.png
  EXPECT_NO_THROW(train->get({0, 1}));
  expect_all(message_of([&] {
               train->get({0, 2});
             }),
             {dir.file("train/b/z_cut.jpg"), "libjpeg-turbo"});
  expect_all(message_of([&] { train->get({3}); }),
             {dir.file("train/b/z_text.png"), "neither a JPEG nor a PNG"});
  expect_all(message_of([&] { train->get({4}); }), {"sample index 4 is out of range"});
}

TEST(ImageFolder, KeysParseResolveAndAreChecked) {
  using dtrain::Config;
  Config c = Config::from_string("data: {format: image_folder, image_size: 32}\n");
  c.resolve(1);
  EXPECT_EQ(c.data.format, dtrain::DataFormat::kImageFolder);
  EXPECT_EQ(c.data.resize, 37);  // round(32 x 8 / 7 = 36.57)
  Config d = Config::from_string("data: {format: image_folder}\n");
  d.resolve(1);
  EXPECT_EQ(d.data.resize, 256);  // torchvision's 256 for 224
  EXPECT_EQ(d.data.train_dir, "train");
  EXPECT_EQ(d.data.test_dir, "val");
  EXPECT_EQ(d.data.crop_ratio, (std::vector<double>{3.0 / 4.0, 4.0 / 3.0}));
  Config e = Config::from_string("data: {format: image_folder}\n", "<string>",
                                 {"data.crop_scale=[0.5, 1]"});
  EXPECT_EQ(e.data.crop_scale, (std::vector<double>{0.5, 1.0}));
  // The dump reads back as the same settings, float lists included.
  EXPECT_EQ(Config::from_string(e.settings_yaml()).settings_yaml(), e.settings_yaml());
  auto bad = [](const std::string& override) {
    return message_of(
        [&] { Config::from_string("data: {format: image_folder}\n", "<string>", {override}); });
  };
  for (const auto& [o, says] : std::vector<std::pair<std::string, std::string>>{
           {"data.crop_scale=0.9,0.5", "low <= high"},
           {"data.crop_scale=[0, 1]", "every entry must be in (0.0, 1.0]"},
           {"data.crop_ratio=[1]", "needs 2 numbers"},
           {"data.pixel_std=[0.2, 0, 0.2]", "must be > 0"},
           {"data.pixel_mean=0.5,0.5", "needs 3 numbers"},
           {"data.pixel_mean=[a, b, c]", "expected a finite number"},
           {"data.image_size=0", "must be >= 1"}}) {
    const std::string m = bad(o);
    EXPECT_NE(m.find(o.substr(0, o.find('='))), std::string::npos) << m;
    EXPECT_NE(m.find(says), std::string::npos) << o << ": " << m;
  }
}

}  // namespace
