// The GPU path's resampling (Note [GPU decoding]) is the CPU Resampler's: the tap table
// gpu_jpeg() builds for src/cuda/resample.cu, applied here on the host by the kernels' own code
// (src/cuda/resample_pixel.h: the job the decoder builds, and every thread's work of both passes,
// thread after thread), gives the Resampler's bytes exactly for training crops (shrunk,
// enlarged, the identity; flipped or not) and evaluation crops. The kernels themselves run in the
// gpu tier (tests/gpu/test_gpu_decode.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/resample_pixel.h"
#include "data/images/gpu_decode.h"
#include "data/images/image_transforms.h"

namespace {

using dtrain::detail::Box;
using dtrain::detail::CropBox;
using dtrain::detail::GpuJpeg;
using dtrain::detail::ResamplePlan;
using dtrain::detail::ResampleTaps;
using dtrain::detail::RgbView;

// resample.cu's horizontal then vertical kernel on the host: the job as the decoder builds it (the
// sample in slot 1 of a batch of 2), then every thread's work of each pass, one after another.
std::vector<uint8_t> kernels_on_host(GpuJpeg g, const std::vector<int32_t>& taps, const std::vector<uint8_t>& rgb,
                                     int64_t size) {
  g.slot = 1;
  std::vector<uint8_t> mid(static_cast<size_t>((g.rows_end - g.rows_first) * size * 3));
  std::vector<uint8_t> batch(static_cast<size_t>(2 * 3 * size * size), 0);
  const dtrain::cuda::ResampleJob j =
      dtrain::cuda::resample_job(g, rgb.data(), mid.data(), batch.data(), taps.data() + g.taps, size);
  const int s = static_cast<int>(size);
  for (int r = 0; r < j.rows; ++r)
    for (int x = 0; x < s; ++x) dtrain::cuda::horizontal_pixel(j, s, x, r);
  for (int y = 0; y < s; ++y)
    for (int x = 0; x < s; ++x) dtrain::cuda::vertical_pixel(j, s, x, y);
  EXPECT_TRUE(std::all_of(batch.begin(), batch.begin() + 3 * size * size, [](uint8_t b) { return b == 0; }))
      << "the job wrote outside its slot";
  return {batch.begin() + 3 * size * size, batch.end()};
}

struct Case {
  int64_t width, height;
  ResamplePlan plan;
};

void expect_same(const Case& c, int64_t size) {
  std::vector<uint8_t> rgb(static_cast<size_t>(c.width * c.height * 3));
  uint32_t r = 12345;
  for (auto& b : rgb) b = static_cast<uint8_t>((r = r * 1664525u + 1013904223u) >> 24);
  std::vector<int32_t> taps = {7, 7, 7};  // an earlier sample's taps: offsets must hold
  ResampleTaps h, v;
  const GpuJpeg g = dtrain::detail::gpu_jpeg(c.width, c.height, c.plan, size, taps, h, v);
  std::vector<uint8_t> cpu(static_cast<size_t>(3 * size * size));
  dtrain::detail::Resampler resampler;
  const RgbView view{rgb.data(), c.width, c.height, c.width * 3};
  resampler.run(view, c.plan, cpu.data());
  const ResamplePlan& p = c.plan;
  EXPECT_EQ(kernels_on_host(g, taps, rgb, size), cpu)
      << "region " << p.region.left << "," << p.region.top << " " << p.region.width << "x" << p.region.height
      << " grid " << p.grid_width << "x" << p.grid_height << " flip " << p.flip;
}

TEST(GpuTaps, TrainingCropsAreTheResamplersBytes) {
  const int64_t s = 24;
  for (bool flip : {false, true}) {
    expect_same({120, 90, {{10, 20, 60, 75}, {0, 0, 75, 60}, s, s, {0, 0, s, s}, flip}}, s);  // shrink
    expect_same({120, 90, {{3, 5, 17, 11}, {0, 0, 11, 17}, s, s, {0, 0, s, s}, flip}}, s);    // enlarge
    expect_same({120, 90, {{30, 40, s, s}, {0, 0, 24, 24}, s, s, {0, 0, s, s}, flip}}, s);    // identity
    expect_same({120, 90, {{0, 0, 90, 120}, {0, 0, 120, 90}, s, s, {0, 0, s, s}, flip}}, s);  // whole image
    // A crop mapped into a scaled decode: fractional box within the whole-pixel region.
    expect_same({60, 45, {{5, 10, 31, 38}, {0.5, 0.25, 37.5, 30.75}, s, s, {0, 0, s, s}, flip}}, s);
  }
  // Random crops as the image folder draws them.
  for (int64_t i = 0; i < 20; ++i) {
    dtrain::detail::SampleRandom random(3, 1, i);
    const CropBox c = dtrain::detail::random_resized_crop(97, 61, {0.08, 1.0}, {0.75, 4.0 / 3}, random);
    expect_same({97, 61, {c, {0, 0, static_cast<double>(c.width), static_cast<double>(c.height)}, s, s, {0, 0, s, s},
                          i % 2 == 0}},
                s);
  }
}

TEST(GpuTaps, EvaluationCropsAreTheResamplersBytes) {
  const int64_t s = 24;
  for (const auto& [w, h] : std::vector<std::pair<int64_t, int64_t>>{{120, 90}, {61, 97}, {27, 40}, {28, 28}}) {
    const auto center = dtrain::detail::resize_center_crop(w, h, 28, s);
    expect_same({w, h, {{0, 0, h, w}, {0, 0, static_cast<double>(w), static_cast<double>(h)}, center.resized_width,
                        center.resized_height, center.crop, false}},
                s);
  }
}

}  // namespace
