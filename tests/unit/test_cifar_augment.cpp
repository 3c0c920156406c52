// CIFAR's training augmentation (Note [cifar augmentation]): data.crop_padding P and data.hflip
// as torchvision's RandomCrop(32, padding=P) (fill 0) + RandomHorizontalFlip(0.5). Each training
// image is compared with the candidates of the definition, built here literally: the original
// padded with P zero pixels on every side, cropped to 32x32 at (top, left) in [0, 2P]^2, mirrored
// or not; exactly one candidate must match. Over many samples and epochs every offset and both
// flip states occur about as often as uniform draws make them; a sample's pixels depend on (seed,
// epoch, index) only; evaluation images and the default config are never augmented; the keys are
// checked, resolved and reported as unused where they do not apply.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "data/images/image_transforms.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "session/unused_keys.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::message_of;
using test::TempDir;

constexpr int kSide = 32, kPlane = kSide * kSide, kPixels = 3 * kPlane;
constexpr int kPerBatch = 8, kTrain = 5 * kPerBatch, kTest = 6;

// Record i of batch b (b = 5: the test batch): pixels in 1..255, never 0 (so a 0 is padding),
// no image the mirror or a shift of itself.
uint8_t pixel(int b, int i, int c, int y, int x) {
  return static_cast<uint8_t>(1 + (97 * i + 59 * c + 31 * y + 7 * x + (x * x) % 11 + 13 * b) % 255);
}
int label(int b, int i) { return (3 * b + i) % 10; }

std::vector<uint8_t> image(int b, int i) {
  std::vector<uint8_t> v(kPixels);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < kSide; ++y)
      for (int x = 0; x < kSide; ++x)
        v[static_cast<size_t>(c * kPlane + y * kSide + x)] = pixel(b, i, c, y, x);
  return v;
}

void write_cifar10(const std::string& dir) {
  for (int b = 0; b <= 5; ++b) {
    std::ofstream f(dir + "/" +
                        (b < 5 ? "data_batch_" + std::to_string(b + 1) + ".bin"
                               : std::string("test_batch.bin")),
                    std::ios::binary);
    for (int i = 0; i < (b < 5 ? kPerBatch : kTest); ++i) {
      f.put(static_cast<char>(label(b, i)));
      const auto px = image(b, i);
      f.write(reinterpret_cast<const char*>(px.data()), kPixels);
    }
    ASSERT_TRUE(f.good());
  }
}

// Training sample n is record n % 8 of batch n / 8.
std::vector<uint8_t> train_image(int64_t n) {
  return image(static_cast<int>(n / kPerBatch), static_cast<int>(n % kPerBatch));
}

// torchvision's transforms on `img`, literally: pad by p zeros, crop at (top, left), mirror.
std::vector<uint8_t> reference(const std::vector<uint8_t>& img, int p, int top, int left,
                               bool flip) {
  const int side = kSide + 2 * p;
  std::vector<uint8_t> padded(static_cast<size_t>(3 * side * side), 0);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < kSide; ++y)
      for (int x = 0; x < kSide; ++x)
        padded[static_cast<size_t>(c * side * side + (y + p) * side + x + p)] =
            img[static_cast<size_t>(c * kPlane + y * kSide + x)];
  std::vector<uint8_t> out(kPixels);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < kSide; ++y)
      for (int x = 0; x < kSide; ++x) {
        const int cx = flip ? kSide - 1 - x : x;  // RandomHorizontalFlip after the crop
        out[static_cast<size_t>(c * kPlane + y * kSide + x)] =
            padded[static_cast<size_t>(c * side * side + (y + top) * side + cx + left)];
      }
  return out;
}

struct Move {
  int dx, dy;
  bool flip;
  bool operator<(const Move& o) const {
    return std::tie(dx, dy, flip) < std::tie(o.dx, o.dy, o.flip);
  }
};

// Every candidate of `original`: (dx, dy, flip) = (p - left, p - top, flip) and its pixels.
std::vector<std::pair<Move, std::vector<uint8_t>>> candidates(const std::vector<uint8_t>& original,
                                                              int p) {
  std::vector<std::pair<Move, std::vector<uint8_t>>> c;
  for (int top = 0; top <= 2 * p; ++top)
    for (int left = 0; left <= 2 * p; ++left)
      for (bool flip : {false, true})
        c.push_back({{p - left, p - top, flip}, reference(original, p, top, left, flip)});
  return c;
}

std::vector<uint8_t> row(const at::Tensor& inputs, int64_t k) {
  const at::Tensor r = inputs[k].contiguous();
  return std::vector<uint8_t>(r.data_ptr<uint8_t>(), r.data_ptr<uint8_t>() + r.numel());
}

std::vector<int64_t> all(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// The data section of a run's config on `dir`, resolved as a run resolves it.
DataConfig resolved(const std::string& dir, const std::vector<std::string>& overrides) {
  std::vector<std::string> o = overrides;
  o.push_back("data.path=" + dir);
  Config c = Config::from_string("data: {format: cifar10, normalize: false}\n", "<string>", o);
  c.resolve(1);
  return c.data;
}

// The moves of every training sample over `epochs` epochs, each checked to be the one candidate.
std::vector<Move> moves_of(const Dataset& train, int p, int64_t epochs) {
  std::vector<std::vector<std::pair<Move, std::vector<uint8_t>>>> of(kTrain);
  for (int64_t n = 0; n < kTrain; ++n) of[static_cast<size_t>(n)] = candidates(train_image(n), p);
  std::vector<Move> out;
  for (int64_t e = 0; e < epochs; ++e) {
    const Batch b = train.fetch(all(kTrain), e, false);
    for (int64_t n = 0; n < kTrain; ++n) {
      const std::vector<uint8_t> got = row(b.inputs, n);
      std::vector<Move> m;
      for (const auto& [move, pixels] : of[static_cast<size_t>(n)])
        if (pixels == got) m.push_back(move);
      EXPECT_EQ(m.size(), 1u) << "epoch " << e << " sample " << n << ": " << m.size()
                              << " candidates match";
      EXPECT_EQ(b.targets[n].item<int64_t>(),
                label(static_cast<int>(n / kPerBatch), static_cast<int>(n % kPerBatch)));
      if (m.size() == 1) out.push_back(m[0]);
    }
  }
  return out;
}

TEST(CifarAugment, EachImageIsTheOriginalMovedWithZerosShiftedInAndMaybeMirrored) {
  TempDir dir;
  write_cifar10(dir.path());
  const Splits s =
      make_datasets(resolved(dir.path(), {"data.crop_padding=4", "data.hflip=true"}), 0);
  const std::string d = s.train->describe();
  EXPECT_NE(
      d.find(
          "training: random 32x32 crops of the image padded by 4 zero pixels, flipped at random"),
      std::string::npos)
      << d;
  const int64_t epochs = 50;
  const std::vector<Move> moves = moves_of(*s.train, 4, epochs);
  ASSERT_EQ(moves.size(), static_cast<size_t>(kTrain * epochs));  // 2000 draws
  std::map<int, int> dx, dy;
  std::set<std::pair<int, int>> offsets;
  int flipped = 0;
  for (const Move& m : moves)
    ++dx[m.dx], ++dy[m.dy], flipped += m.flip, offsets.insert({m.dx, m.dy});
  // Uniform draws: each of the 9 values of dx (and of dy) Binomial(2000, 1/9), mean 222, std 14;
  // flips Binomial(2000, 1/2), mean 1000, std 22; within 5 std of those. All 81 offsets occur
  // (each about 25 times).
  for (int v = -4; v <= 4; ++v) {
    EXPECT_NEAR(dx[v], 2000.0 / 9, 5 * 14.1) << "dx " << v;
    EXPECT_NEAR(dy[v], 2000.0 / 9, 5 * 14.1) << "dy " << v;
  }
  EXPECT_EQ(dx.size(), 9u);
  EXPECT_EQ(dy.size(), 9u);
  EXPECT_EQ(offsets.size(), 81u);
  EXPECT_NEAR(flipped, 1000, 5 * 22.4);
}

TEST(CifarAugment, CropsWithoutFlipsAndFlipsWithoutCrops) {
  TempDir dir;
  write_cifar10(dir.path());
  // Padding 1 alone: moves in [-1, 1]^2, never mirrored.
  const Splits crops =
      make_datasets(resolved(dir.path(), {"data.crop_padding=1", "data.hflip=false"}), 0);
  std::set<std::pair<int, int>> offsets;
  for (const Move& m : moves_of(*crops.train, 1, 10)) {
    EXPECT_FALSE(m.flip);
    offsets.insert({m.dx, m.dy});
  }
  EXPECT_EQ(offsets.size(), 9u);
  // Flips alone: the original or its mirror, about half each (Binomial(400, 1/2): 200 +- 50).
  const Splits flips = make_datasets(resolved(dir.path(), {"data.hflip=true"}), 0);
  EXPECT_NE(flips.train->describe().find("training: flipped at random"), std::string::npos)
      << flips.train->describe();
  int flipped = 0;
  const std::vector<Move> m = moves_of(*flips.train, 0, 10);
  ASSERT_EQ(m.size(), 400u);
  for (const Move& v : m) flipped += v.flip;
  EXPECT_NEAR(flipped, 200, 50);
}

TEST(CifarAugment, TheSameSeedEpochAndIndexGiveTheSameImage) {
  TempDir dir;
  write_cifar10(dir.path());
  const DataConfig cfg = resolved(dir.path(), {"data.crop_padding=4", "data.hflip=true"});
  const auto train = make_datasets(cfg, 7).train;
  const at::Tensor e3 = train->fetch(all(kTrain), 3, false).inputs;
  // Again, from a dataset built anew, and in other batches at other places (another thread or
  // rank drawing them): the same pixels.
  EXPECT_TRUE(make_datasets(cfg, 7).train->fetch(all(kTrain), 3, false).inputs.equal(e3));
  const at::Tensor some = train->fetch({31, 2, 2, 17}, 3, false).inputs;
  EXPECT_TRUE(some[0].equal(e3[31]));
  EXPECT_TRUE(some[1].equal(e3[2]));
  EXPECT_TRUE(some[2].equal(e3[2]));
  EXPECT_TRUE(some[3].equal(e3[17]));
  // get() is epoch 0's draw.
  EXPECT_TRUE(train->get(all(kTrain)).inputs.equal(train->fetch(all(kTrain), 0, false).inputs));
  // Another epoch or another seed: other draws (1 in 162 of the same move by chance).
  const at::Tensor e4 = train->fetch(all(kTrain), 4, false).inputs;
  const at::Tensor seed8 = make_datasets(cfg, 8).train->fetch(all(kTrain), 3, false).inputs;
  int other_epoch = 0, other_seed = 0;
  for (int64_t n = 0; n < kTrain; ++n)
    other_epoch += !e4[n].equal(e3[n]), other_seed += !seed8[n].equal(e3[n]);
  EXPECT_GE(other_epoch, kTrain - 3);
  EXPECT_GE(other_seed, kTrain - 3);
  // The draws of Note [cifar augmentation]: top, then left, then the flip, from
  // SampleRandom(seed, epoch, index).
  for (int64_t n = 0; n < kTrain; ++n) {
    detail::SampleRandom random(7, 3, n);
    const int64_t top = random.below(9), left = random.below(9);
    const bool flip = random.uniform(0, 1) < 0.5;
    EXPECT_EQ(row(e3, n),
              reference(train_image(n), 4, static_cast<int>(top), static_cast<int>(left), flip))
        << "sample " << n;
  }
}

TEST(CifarAugment, EvaluationImagesAndTheDefaultConfigAreNeverAugmented) {
  TempDir dir;
  write_cifar10(dir.path());
  const Splits s =
      make_datasets(resolved(dir.path(), {"data.crop_padding=4", "data.hflip=true"}), 0);
  EXPECT_EQ(s.test->describe().find("training:"), std::string::npos) << s.test->describe();
  for (int64_t e = 0; e < 20; ++e) {
    const Batch t = s.test->fetch(all(kTest), e, false);
    for (int i = 0; i < kTest; ++i)
      EXPECT_EQ(row(t.inputs, i), image(5, i)) << "epoch " << e << " test sample " << i;
  }
  // The default config (no data.crop_padding, no data.hflip): the training images as stored.
  const DataConfig plain = resolved(dir.path(), {});
  EXPECT_EQ(plain.crop_padding, 0);
  EXPECT_FALSE(plain.hflip);
  const auto train = make_datasets(plain, 0).train;
  EXPECT_EQ(train->describe().find("training:"), std::string::npos) << train->describe();
  for (int64_t e = 0; e < 5; ++e) {
    const Batch b = train->fetch(all(kTrain), e, false);
    for (int64_t n = 0; n < kTrain; ++n)
      EXPECT_EQ(row(b.inputs, n), train_image(n)) << "epoch " << e << " sample " << n;
  }
}

TEST(CifarAugment, KeysAreCheckedResolvedAndReportedWhereUnused) {
  // data.hflip: on for image_folder, off for CIFAR unless the config sets it, whether the file
  // or an override names the format.
  EXPECT_TRUE(resolved("/x", {"data.format=image_folder"}).hflip);
  EXPECT_FALSE(resolved("/x", {"data.format=cifar100"}).hflip);
  EXPECT_TRUE(resolved("/x", {"data.hflip=true"}).hflip);
  EXPECT_FALSE(
      Config::from_string("data: {format: idx}\n", "<string>", {"data.format=cifar10"}).data.hflip);
  EXPECT_TRUE(Config::from_string("data: {format: cifar10, hflip: true}\n").data.hflip);
  // The resolved settings load again as the same settings.
  Config c = Config::from_string("data: {format: cifar10, crop_padding: 4}\n");
  c.resolve(1);
  EXPECT_EQ(Config::from_string(c.settings_yaml()).settings_yaml(), c.settings_yaml());
  for (const auto& [o, says] : std::vector<std::pair<std::string, std::string>>{
           {"data.crop_padding=-1", "must be in [0, 31], got -1"},
           {"data.crop_padding=32", "must be in [0, 31], got 32 (a padding of 32 or more"},
           {"data.crop_padding=four", "data.crop_padding"},
           {"data.hflip=sometimes", "data.hflip"}}) {
    const std::string m =
        message_of([&] { Config::from_string("data: {format: cifar10}\n", "<string>", {o}); });
    EXPECT_NE(m.find(o.substr(0, o.find('='))), std::string::npos) << m;
    EXPECT_NE(m.find(says), std::string::npos) << o << ": " << m;
  }
  // A DataConfig filled in C++ is checked too.
  TempDir dir;
  write_cifar10(dir.path());
  DataConfig bad = resolved(dir.path(), {});
  bad.crop_padding = 40;
  const std::string m = message_of([&] { make_datasets(bad, 0); });
  EXPECT_NE(m.find("data.crop_padding"), std::string::npos) << m;
  EXPECT_NE(m.find("must be in [0, 31], got 40"), std::string::npos) << m;
  // Set where the format does not read them: reported as the other unused keys are.
  auto unused = [](const std::string& format, const std::vector<std::string>& o) {
    std::string all;
    for (const auto& l :
         detail::unused_keys(Config::from_string("data: {format: " + format + "}\n", "u.yaml", o)))
      all += l + "\n";
    return all;
  };
  const std::string idx = unused("idx", {"data.crop_padding=4", "data.hflip=false"});
  EXPECT_NE(idx.find("data.crop_padding is set (command line 'data.crop_padding=4') but not used: "
                     "data.format is idx"),
            std::string::npos)
      << idx;
  EXPECT_NE(
      idx.find(
          "data.hflip is set (command line 'data.hflip=false') but not used: data.format is idx"),
      std::string::npos)
      << idx;
  const std::string folder = unused("image_folder", {"data.crop_padding=4", "data.hflip=false"});
  EXPECT_NE(folder.find("data.crop_padding is set"), std::string::npos) << folder;
  EXPECT_EQ(folder.find("data.hflip"), std::string::npos) << folder;
  for (const char* format : {"cifar10", "cifar100"})
    EXPECT_EQ(unused(format, {"data.crop_padding=4", "data.hflip=true"}), "") << format;
}

}  // namespace
}  // namespace dtrain
