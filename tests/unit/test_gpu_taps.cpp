// The GPU path's resampling (Note [GPU decoding]) is the CPU Resampler's: the tap table
// gpu_jpeg() builds for src/cuda/resample.cu, applied here on the host by the kernels' own code
// (src/cuda/resample_pixel.h: the job the decoder builds, and every thread's work of both passes,
// thread after thread) to nvJPEG-style Y, Cb, Cr planes (4:4:4, 4:2:2, 4:2:0, grayscale), gives
// the Resampler's bytes exactly on the same pixels converted to RGB, for training crops (shrunk,
// enlarged, the identity; flipped or not) and evaluation crops. The conversion with chroma
// replicated is libjpeg-turbo's own: its decode with fast upsampling equals the kernels' pixel
// conversion of its raw planes, byte for byte. Each sample's bytes are the same again from only
// the box jpeg_roi() gives it (src/cuda/jpeg_roi.h), its planes cut from the whole image's. The
// kernels themselves run in the gpu tier (tests/gpu/test_gpu_decode.cpp).
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "cuda/jpeg_roi.h"
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

// An image as nvJPEG's planar output holds it (cuda::jpeg_planes()'s layout), and the same
// pixels as interleaved RGB: random Y, Cb and Cr, converted by libjpeg's formulas (jdcolor.c's
// tables, written out here: FIX(x) = x * 65536 rounded) with chroma replicated.
struct Planes {
  std::vector<uint8_t> bytes, rgb;
};
int32_t fix(double x) { return static_cast<int32_t>(x * 65536 + 0.5); }
uint8_t limit(int32_t v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }
Planes random_planes(const GpuJpeg& g, uint32_t seed) {
  Planes p;
  const dtrain::cuda::JpegPlanes pl = dtrain::cuda::jpeg_planes(g);
  p.bytes.resize(static_cast<size_t>(pl.bytes));
  for (auto& b : p.bytes) b = static_cast<uint8_t>((seed = seed * 1664525u + 1013904223u) >> 24);
  const auto plane = [&](int c) { return p.bytes.data() + pl.offset[c]; };
  p.rgb.resize(static_cast<size_t>(g.width) * g.height * 3);
  for (int64_t y = 0; y < g.height; ++y)
    for (int64_t x = 0; x < g.width; ++x) {
      uint8_t* o = p.rgb.data() + (y * g.width + x) * 3;
      const int32_t l = plane(0)[y * pl.pitch[0] + x];
      if (g.planes == 1) {
        o[0] = o[1] = o[2] = static_cast<uint8_t>(l);
        continue;
      }
      const int32_t cb = plane(1)[(y >> g.shift_y[0]) * pl.pitch[1] + (x >> g.shift_x[0])] - 128;
      const int32_t cr = plane(2)[(y >> g.shift_y[1]) * pl.pitch[2] + (x >> g.shift_x[1])] - 128;
      o[0] = limit(l + ((fix(1.40200) * cr + 32768) >> 16));
      o[1] = limit(l + ((-fix(0.34414) * cb + 32768 - fix(0.71414) * cr) >> 16));
      o[2] = limit(l + ((fix(1.77200) * cb + 32768) >> 16));
    }
  return p;
}

// resample.cu's horizontal then vertical kernel on the host: the job as the decoder builds it (the
// sample in slot 1 of a batch of 2), then every thread's work of each pass, one after another.
std::vector<uint8_t> kernels_on_host(GpuJpeg g, const std::vector<int32_t>& taps,
                                     std::vector<uint8_t>& planes, int64_t size) {
  g.slot = 1;
  std::vector<uint8_t> mid(static_cast<size_t>((g.rows_end - g.rows_first) * size * 3));
  std::vector<uint8_t> batch(static_cast<size_t>(2 * 3 * size * size), 0);
  const dtrain::cuda::ResampleJob j = dtrain::cuda::resample_job(
      g, planes.data(), mid.data(), batch.data(), taps.data() + g.taps, size);
  const int s = static_cast<int>(size);
  for (int r = 0; r < j.rows; ++r)
    for (int x = 0; x < s; ++x) dtrain::cuda::horizontal_pixel(j, s, x, r);
  for (int y = 0; y < s; ++y)
    for (int x = 0; x < s; ++x) dtrain::cuda::vertical_pixel(j, s, x, y);
  EXPECT_TRUE(std::all_of(batch.begin(), batch.begin() + 3 * size * size, [](uint8_t b) {
    return b == 0;
  })) << "the job wrote outside its slot";
  return {batch.begin() + 3 * size * size, batch.end()};
}

// The same sample decoded only in its box (src/cuda/jpeg_roi.h): the box's planes cut out of the
// whole image's, and the kernels' bytes from them; the box within the image, on whole MCUs (or
// the image's edge), around every pixel the taps read, and its planes smaller than the image's.
// Returns whether the sample got a box (a crop of the whole image gets none).
bool expect_box_gives_the_same(const GpuJpeg& g, const std::vector<int32_t>& taps,
                               const std::vector<uint8_t>& whole, int64_t size,
                               const std::vector<uint8_t>& expected) {
  GpuJpeg r = g;
  dtrain::detail::jpeg_roi(r, taps.data() + g.taps, size);
  if (r.roi_width == 0) return false;
  const int mx = 8 << (g.planes == 1 ? 0 : std::max(g.shift_x[0], g.shift_x[1]));
  const int my = 8 << (g.planes == 1 ? 0 : std::max(g.shift_y[0], g.shift_y[1]));
  EXPECT_EQ(r.roi_x % mx, 0);
  EXPECT_EQ(r.roi_y % my, 0);
  EXPECT_TRUE((r.roi_x + r.roi_width) % mx == 0 || r.roi_x + r.roi_width == g.width);
  EXPECT_TRUE((r.roi_y + r.roi_height) % my == 0 || r.roi_y + r.roi_height == g.height);
  EXPECT_LE(r.roi_x + r.roi_width, g.width);
  EXPECT_LE(r.roi_y + r.roi_height, g.height);
  EXPECT_EQ(r.left + r.roi_x, g.left);
  EXPECT_EQ(r.top + r.roi_y, g.top);
  EXPECT_GE(r.top + r.rows_first, 0);
  EXPECT_LE(r.top + r.rows_end, r.roi_height);
  const dtrain::cuda::JpegPlanes from = dtrain::cuda::jpeg_planes(g);
  const dtrain::cuda::JpegPlanes to = dtrain::cuda::jpeg_planes(r);
  EXPECT_LT(to.bytes, from.bytes);
  std::vector<uint8_t> box(static_cast<size_t>(to.bytes));
  for (int c = 0; c < (g.planes == 1 ? 1 : 3); ++c) {
    const int sx = c == 0 ? 0 : g.shift_x[c - 1], sy = c == 0 ? 0 : g.shift_y[c - 1];
    for (int64_t y = 0; y < to.rows[c]; ++y)
      std::copy_n(
          whole.data() + from.offset[c] + ((r.roi_y >> sy) + y) * from.pitch[c] + (r.roi_x >> sx),
          to.pitch[c], box.data() + to.offset[c] + y * to.pitch[c]);
  }
  EXPECT_EQ(kernels_on_host(r, taps, box, size), expected)
      << "box " << r.roi_x << "," << r.roi_y << " " << r.roi_width << "x" << r.roi_height;
  return true;
}

struct Case {
  int64_t width, height;
  ResamplePlan plan;
};

int g_boxes = 0;  // samples decoded in a box as well

// sampling: 444, 422, 420 or 1 (grayscale).
void expect_same(const Case& c, int64_t size, int sampling = 444) {
  std::vector<int32_t> taps = {7, 7, 7};  // an earlier sample's taps: offsets must hold
  ResampleTaps h, v;
  GpuJpeg g = dtrain::detail::gpu_jpeg(c.width, c.height, c.plan, size, taps, h, v);
  g.planes = sampling == 1 ? 1 : 3;
  for (int k = 0; k < 2; ++k)
    g.shift_x[k] = sampling == 444 ? 0 : 1, g.shift_y[k] = sampling == 420 ? 1 : 0;
  Planes p = random_planes(g, static_cast<uint32_t>(12345 + sampling));
  std::vector<uint8_t> cpu(static_cast<size_t>(3 * size * size));
  dtrain::detail::Resampler resampler;
  const RgbView view{p.rgb.data(), c.width, c.height, c.width * 3};
  resampler.run(view, c.plan, cpu.data());
  const ResamplePlan& q = c.plan;
  EXPECT_EQ(kernels_on_host(g, taps, p.bytes, size), cpu)
      << "sampling " << sampling << " region " << q.region.left << "," << q.region.top << " "
      << q.region.width << "x" << q.region.height << " grid " << q.grid_width << "x"
      << q.grid_height << " flip " << q.flip;
  g_boxes += expect_box_gives_the_same(g, taps, p.bytes, size, cpu) ? 1 : 0;
}

TEST(GpuTaps, TrainingCropsAreTheResamplersBytes) {
  const int64_t s = 24;
  for (bool flip : {false, true}) {
    expect_same({120, 90, {{10, 20, 60, 75}, {0, 0, 75, 60}, s, s, {0, 0, s, s}, flip}},
                s);  // shrink
    expect_same({120, 90, {{3, 5, 17, 11}, {0, 0, 11, 17}, s, s, {0, 0, s, s}, flip}},
                s);  // enlarge
    expect_same({120, 90, {{30, 40, s, s}, {0, 0, 24, 24}, s, s, {0, 0, s, s}, flip}},
                s);  // identity
    expect_same({120, 90, {{0, 0, 90, 120}, {0, 0, 120, 90}, s, s, {0, 0, s, s}, flip}},
                s);  // whole image
    // A crop mapped into a scaled decode: fractional box within the whole-pixel region.
    expect_same({60, 45, {{5, 10, 31, 38}, {0.5, 0.25, 37.5, 30.75}, s, s, {0, 0, s, s}, flip}}, s);
  }
  // Random crops as the image folder draws them.
  for (int64_t i = 0; i < 20; ++i) {
    dtrain::detail::SampleRandom random(3, 1, i);
    const CropBox c =
        dtrain::detail::random_resized_crop(97, 61, {0.08, 1.0}, {0.75, 4.0 / 3}, random);
    expect_same({97,
                 61,
                 {c,
                  {0, 0, static_cast<double>(c.width), static_cast<double>(c.height)},
                  s,
                  s,
                  {0, 0, s, s},
                  i % 2 == 0}},
                s);
  }
}

TEST(GpuTaps, SubsampledAndGrayPlanesAreTheResamplersBytes) {
  const int64_t s = 24;
  for (int sampling : {422, 420, 1})
    for (bool flip : {false, true}) {
      expect_same({120, 90, {{10, 20, 60, 75}, {0, 0, 75, 60}, s, s, {0, 0, s, s}, flip}}, s,
                  sampling);
      expect_same({121, 91, {{3, 5, 17, 11}, {0, 0, 11, 17}, s, s, {0, 0, s, s}, flip}}, s,
                  sampling);  // odd sizes
      expect_same({120, 90, {{0, 0, 90, 120}, {0, 0, 120, 90}, s, s, {0, 0, s, s}, flip}}, s,
                  sampling);
    }
}

// Random crops of a larger image (odd sizes: the boxes meet the right and bottom edges), every
// sampling: decoding only the box gives the whole image's bytes (expect_same checks each sample
// both ways), and most samples get a box.
TEST(GpuTaps, BoxDecodesGiveTheWholeImagesBytes) {
  const int64_t s = 24;
  for (int sampling : {444, 422, 420, 1}) {
    const int before = g_boxes;
    for (int64_t i = 0; i < 12; ++i) {
      dtrain::detail::SampleRandom random(5, 2, i);
      const CropBox c =
          dtrain::detail::random_resized_crop(301, 203, {0.08, 1.0}, {0.75, 4.0 / 3}, random);
      const auto w = static_cast<double>(c.width), h = static_cast<double>(c.height);
      expect_same({301, 203, {c, {0, 0, w, h}, s, s, {0, 0, s, s}, i % 2 == 1}}, s, sampling);
    }
    EXPECT_GE(g_boxes - before, 8) << "sampling " << sampling;
  }
}

// libjpeg-turbo decoding with chroma replicated (TJFLAG_FASTUPSAMPLE: its merged or simple
// upsampling) is, pixel for pixel, the kernels' conversion (cuda::ycc_to_rgb at x >> shift,
// y >> shift) of libjpeg-turbo's own raw planes: the GPU path's colors are the CPU path's but for
// the upsampling filter and the IDCT.
TEST(GpuTaps, PixelConversionIsLibjpegTurbosDecodeWithChromaReplicated) {
  const int w = 77, h = 53;
  std::vector<uint8_t> src(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = src.data() + (static_cast<size_t>(y) * w + x) * 3;
      p[0] = static_cast<uint8_t>(255 * x / w), p[1] = static_cast<uint8_t>(255 * y / h);
      p[2] = static_cast<uint8_t>((x * 7 + y * 13) % 256);
      if ((x - 30) * (x - 30) + (y - 25) * (y - 25) < 200) p[0] = 230, p[1] = 20, p[2] = 40;
    }
  for (const auto& [subsamp, sx, sy] :
       std::vector<std::tuple<int, int, int>>{{TJSAMP_444, 0, 0},
                                              {TJSAMP_422, 1, 0},
                                              {TJSAMP_420, 1, 1},
                                              {TJSAMP_440, 0, 1},
                                              {TJSAMP_GRAY, 0, 0}}) {
    tjhandle tj = tjInitCompress();
    unsigned char* jpeg = nullptr;
    unsigned long size = 0;
    ASSERT_EQ(tjCompress2(tj, src.data(), w, 0, h, TJPF_RGB, &jpeg, &size, subsamp, 85, 0), 0)
        << tjGetErrorStr2(tj);
    tjDestroy(tj);
    tjhandle d = tjInitDecompress();
    std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
    ASSERT_EQ(tjDecompress2(d, jpeg, size, rgb.data(), w, 0, h, TJPF_RGB, TJFLAG_FASTUPSAMPLE), 0)
        << tjGetErrorStr2(d);
    const int planes = subsamp == TJSAMP_GRAY ? 1 : 3;
    std::vector<std::vector<uint8_t>> plane(3);
    unsigned char* dst[3] = {};
    int strides[3] = {};
    for (int c = 0; c < planes; ++c) {
      strides[c] = tjPlaneWidth(c, w, subsamp);
      plane[c].resize(static_cast<size_t>(tjPlaneSizeYUV(c, w, strides[c], h, subsamp)));
      dst[c] = plane[c].data();
    }
    ASSERT_EQ(tjDecompressToYUVPlanes(d, jpeg, size, dst, w, strides, h, 0), 0)
        << tjGetErrorStr2(d);
    tjDestroy(d);
    tjFree(jpeg);
    int differ = 0;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const uint8_t* want = rgb.data() + (static_cast<size_t>(y) * w + x) * 3;
        const int32_t l = plane[0][static_cast<size_t>(y) * strides[0] + x];
        int32_t r = l, g = l, b = l;
        if (planes == 3)
          dtrain::cuda::ycc_to_rgb(
              l, plane[1][static_cast<size_t>(y >> sy) * strides[1] + (x >> sx)],
              plane[2][static_cast<size_t>(y >> sy) * strides[2] + (x >> sx)], r, g, b);
        differ += (r != want[0]) + (g != want[1]) + (b != want[2]);
      }
    EXPECT_EQ(differ, 0) << "subsampling " << subsamp
                         << ": values that differ from libjpeg-turbo's";
  }
}

TEST(GpuTaps, EvaluationCropsAreTheResamplersBytes) {
  const int64_t s = 24;
  for (const auto& [w, h] :
       std::vector<std::pair<int64_t, int64_t>>{{120, 90}, {61, 97}, {27, 40}, {28, 28}}) {
    const auto center = dtrain::detail::resize_center_crop(w, h, 28, s);
    expect_same({w,
                 h,
                 {{0, 0, h, w},
                  {0, 0, static_cast<double>(w), static_cast<double>(h)},
                  center.resized_width,
                  center.resized_height,
                  center.crop,
                  false}},
                s);
  }
}

}  // namespace
