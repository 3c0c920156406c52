// The image transforms (data/images/image_transforms.h): torchvision's crop geometry from its
// formulas, PIL's bilinear resampling byte for byte (PIL computes the expected pixels), and the
// random crop's range, fallback and determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "data/images/image_codec.h"
#include "data/images/image_transforms.h"
#include "image_reference.h"
#include "test_support.h"

namespace {

using dtrain::detail::Box;
using dtrain::detail::CenterCrop;
using dtrain::detail::CropBox;
using dtrain::detail::decode_png;
using dtrain::detail::random_resized_crop;
using dtrain::detail::ResamplePlan;
using dtrain::detail::Resampler;
using dtrain::detail::resize_center_crop;
using dtrain::detail::RgbImage;
using dtrain::detail::RgbView;
using dtrain::detail::SampleRandom;
using dtrain::test::ImageReference;
using dtrain::test::read_bytes;

void expect_center(const CenterCrop& c, int64_t rw, int64_t rh, int64_t top, int64_t left,
                   int64_t size) {
  EXPECT_EQ(c.resized_width, rw);
  EXPECT_EQ(c.resized_height, rh);
  EXPECT_EQ(c.crop.top, top);
  EXPECT_EQ(c.crop.left, left);
  EXPECT_EQ(c.crop.width, size);
  EXPECT_EQ(c.crop.height, size);
}

TEST(ImageTransforms, ResizeAndCenterCropFollowTorchvisionsFormulas) {
  // longer = int(resize * longer / shorter); offsets int(round((resized - size) / 2.0)), Python
  // rounding halves to even.
  // 500 x 375 -> int(256 * 500 / 375) = int(341.33) = 341; left round(58.5) = 58, top 16.
  expect_center(resize_center_crop(500, 375, 256, 224), 341, 256, 16, 58, 224);
  expect_center(resize_center_crop(375, 500, 256, 224), 256, 341, 58, 16, 224);
  // 97 x 61 -> int(40 * 97 / 61) = int(63.6) = 63; left round(15.5) = 16, top 4.
  expect_center(resize_center_crop(97, 61, 40, 32), 63, 40, 4, 16, 32);
  // a square image: round(2.5) = 2.
  expect_center(resize_center_crop(100, 100, 37, 32), 37, 37, 2, 2, 32);
}

TEST(ImageTransforms, CenterCropAtTheImagesOwnSizeIsItsMiddle) {
  // 41 x 30 with its shorter side already at 30: no resampling; the crop of 20 starts at
  // left round(10.5) = 10, top 5.
  const int64_t w = 41, h = 30, s = 20;
  auto pixel = [](int64_t x, int64_t y, int c) {
    return static_cast<uint8_t>(c == 0   ? (x * 5 + y * 3) % 256
                                : c == 1 ? (x * y) % 256
                                         : (x + 2 * y) % 256);
  };
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) rgb[static_cast<size_t>((y * w + x) * 3 + c)] = pixel(x, y, c);
  const CenterCrop center = resize_center_crop(w, h, 30, s);
  std::vector<uint8_t> out(static_cast<size_t>(3 * s * s));
  Resampler r;
  ResamplePlan plan{CropBox{0, 0, h, w},  Box{0, 0, double(w), double(h)},
                    center.resized_width, center.resized_height,
                    center.crop,          false};
  r.run(RgbView{rgb.data(), w, h, w * 3}, plan, out.data());
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < s; ++y)
      for (int64_t x = 0; x < s; ++x)
        ASSERT_EQ(out[static_cast<size_t>((c * s + y) * s + x)], pixel(x + 10, y + 5, c))
            << c << " " << y << " " << x;
  // Flipped: column x holds the source's column 10 + (s - 1 - x).
  plan.flip = true;
  r.run(RgbView{rgb.data(), w, h, w * 3}, plan, out.data());
  for (int64_t x = 0; x < s; ++x)
    EXPECT_EQ(out[static_cast<size_t>(x)], pixel(10 + s - 1 - x, 5, 0));
}

// PIL's pixels for each job against the Resampler's on the same decoded PNG.
TEST(ImageTransforms, ResamplingIsPilsBilinearByteForByte) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  struct Eval {
    const char* image;
    int64_t resize, size;
  };
  struct Crop {
    const char* image;
    CropBox box;
    int64_t size;
    bool flip;
  };
  // Shrinking (antialiased), enlarging, and one side unchanged.
  const std::vector<Eval> evals = {{"rgb.png", 40, 32},  {"rgb.png", 80, 64},
                                   {"rgb.png", 61, 50},  {"big.png", 256, 224},
                                   {"big.png", 100, 90}, {"big.png", 31, 17}};
  const std::vector<Crop> crops = {
      {"rgb.png", {5, 7, 40, 50}, 32, true},    {"rgb.png", {0, 0, 61, 97}, 64, false},
      {"rgb.png", {10, 20, 30, 30}, 30, false}, {"big.png", {13, 27, 250, 300}, 224, true},
      {"big.png", {0, 0, 301, 403}, 32, false}, {"big.png", {200, 3, 9, 100}, 48, false}};
  std::vector<std::string> jobs;
  for (const auto& e : evals)
    jobs.push_back("eval " + ref.path(e.image) + " " + std::to_string(e.resize) + " " +
                   std::to_string(e.size));
  for (const auto& c : crops)
    jobs.push_back("crop " + ref.path(c.image) + " " + std::to_string(c.box.top) + " " +
                   std::to_string(c.box.left) + " " + std::to_string(c.box.height) + " " +
                   std::to_string(c.box.width) + " " + std::to_string(c.size) + " " +
                   (c.flip ? "1" : "0"));
  const auto pil = ref.run(jobs);
  ASSERT_EQ(pil.size(), jobs.size());
  auto decoded = [&](const char* name) {
    const auto bytes = read_bytes(ref.path(name));
    RgbImage image;
    decode_png(bytes.data(), bytes.size(), name, image);
    return image;
  };
  Resampler r;  // one resampler for all: its buffers are reused across sizes
  size_t k = 0;
  for (const auto& e : evals) {
    SCOPED_TRACE(jobs[k]);
    const RgbImage image = decoded(e.image);
    const CenterCrop center = resize_center_crop(image.width, image.height, e.resize, e.size);
    std::vector<uint8_t> out(static_cast<size_t>(3 * e.size * e.size));
    const ResamplePlan plan{CropBox{0, 0, image.height, image.width},
                            Box{0, 0, double(image.width), double(image.height)},
                            center.resized_width,
                            center.resized_height,
                            center.crop,
                            false};
    r.run(RgbView{image.pixels.data(), image.width, image.height, image.width * 3}, plan,
          out.data());
    EXPECT_EQ(out, pil[k++]);
  }
  for (const auto& c : crops) {
    SCOPED_TRACE(jobs[k]);
    const RgbImage image = decoded(c.image);
    const RgbView view{image.pixels.data(), image.width, image.height, image.width * 3};
    std::vector<uint8_t> out(static_cast<size_t>(3 * c.size * c.size));
    // The crop is the plan's region: run() reads only that part of the whole image.
    const ResamplePlan plan{c.box,
                            Box{0, 0, double(c.box.width), double(c.box.height)},
                            c.size,
                            c.size,
                            CropBox{0, 0, c.size, c.size},
                            c.flip};
    r.run(view, plan, out.data());
    EXPECT_EQ(out, pil[k++]);
  }
}

TEST(ImageTransforms, RandomResizedCropsStayInTheImageAndInRange) {
  const std::vector<double> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  const int64_t w = 400, h = 300;
  double smallest = 1, largest = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    SampleRandom random(7, 0, i);
    const CropBox b = random_resized_crop(w, h, scale, ratio, random);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_GE(b.width, 1);
    ASSERT_GE(b.height, 1);
    ASSERT_LE(b.top + b.height, h);
    ASSERT_LE(b.left + b.width, w);
    // Sides are rounded: area and aspect within the range up to that rounding (< 2% here, where
    // the smallest crop has sides of about 98 pixels).
    const double share = double(b.width * b.height) / double(w * h);
    const double aspect = double(b.width) / double(b.height);
    EXPECT_GE(share, 0.08 * 0.98);
    EXPECT_LE(share, 1.0);
    EXPECT_GE(aspect, 0.75 * 0.98);
    EXPECT_LE(aspect, 4.0 / 3.0 * 1.02);
    smallest = std::min(smallest, share), largest = std::max(largest, share);
  }
  // The area share is drawn uniformly in [0.08, 1): both ends are reached.
  EXPECT_LT(smallest, 0.1);
  EXPECT_GT(largest, 0.9);
}

TEST(ImageTransforms, RandomCropsAreKeyedBySeedEpochAndIndex) {
  const std::vector<double> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  auto crop = [&](uint64_t seed, int64_t epoch, int64_t index) {
    SampleRandom random(seed, epoch, index);
    const CropBox b = random_resized_crop(500, 375, scale, ratio, random);
    return std::vector<int64_t>{b.top, b.left, b.height, b.width};
  };
  int other_epoch = 0, other_seed = 0, other_index = 0;
  for (int64_t i = 0; i < 200; ++i) {
    EXPECT_EQ(crop(3, 2, i), crop(3, 2, i));
    other_epoch += crop(3, 2, i) != crop(3, 3, i);
    other_seed += crop(3, 2, i) != crop(4, 2, i);
    other_index += crop(3, 2, i) != crop(3, 2, i + 1000);
  }
  EXPECT_GE(other_epoch, 195);
  EXPECT_GE(other_seed, 195);
  EXPECT_GE(other_index, 195);
}

TEST(ImageTransforms, ACropThatNeverFitsFallsBackToTheCenter) {
  const std::vector<double> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  // 1000 x 10: every crop of >= 800 pixels with aspect <= 4/3 is taller than 10. Fallback: the
  // aspect 100 is above 4/3: h = 10, w = round(10 x 4/3) = 13, centered: left (1000 - 13) // 2.
  SampleRandom a(0, 0, 0);
  CropBox b = random_resized_crop(1000, 10, scale, ratio, a);
  EXPECT_EQ(b.top, 0);
  EXPECT_EQ(b.left, 493);
  EXPECT_EQ(b.height, 10);
  EXPECT_EQ(b.width, 13);
  // 10 x 1000: w = 10, h = round(10 / 0.75) = 13, top (1000 - 13) // 2.
  SampleRandom c(0, 0, 0);
  b = random_resized_crop(10, 1000, scale, ratio, c);
  EXPECT_EQ(b.top, 493);
  EXPECT_EQ(b.left, 0);
  EXPECT_EQ(b.height, 13);
  EXPECT_EQ(b.width, 10);
}

TEST(ImageTransforms, SampleRandomIsUniform) {
  SampleRandom r(11, 1, 5);
  double sum = 0;
  std::vector<int> counts(7, 0);
  const int n = 14000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform(0, 1);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    const int64_t k = r.below(7);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, 7);
    ++counts[static_cast<size_t>(k)];
  }
  // Mean 1/2 with std sqrt(1/12 / n) = 0.0024: within 5 of those.
  EXPECT_NEAR(sum / n, 0.5, 0.012);
  // Each of 7 values n/7 = 2000 times, std sqrt(n p (1 - p)) = 41: within 5 of those.
  for (int c : counts) EXPECT_NEAR(c, 2000, 205);
}

}  // namespace
