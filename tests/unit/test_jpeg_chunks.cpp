// The GPU JPEG decoder's chunks (src/cuda/jpeg_chunks.h), checked on the host: a batch of images
// of many sizes (a thumbnail up to one image larger than the device buffer) splits into chunks
// that cover it in order; each chunk fits the host and device buffers unless it is one image;
// in the device buffer the jobs, the taps, every decoded image and every row buffer are disjoint,
// start on 256 bytes, are as large as their contents, and end within the chunk's bytes; the taps
// follow each other in the image order. Sizes and expected figures come from the layout's rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/jpeg_chunks.h"

namespace dtrain::detail {
namespace {

// sampling: 444, 422, 420 or 1 (grayscale).
GpuJpeg image(int32_t w, int32_t h, int32_t rows, int32_t h_ksize, int32_t v_ksize,
              int sampling = 444) {
  GpuJpeg g;
  g.width = w, g.height = h;
  g.planes = sampling == 1 ? 1 : 3;
  for (int c = 0; c < 2; ++c)
    g.shift_x[c] = sampling == 444 ? 0 : 1, g.shift_y[c] = sampling == 420 ? 1 : 0;
  g.rows_first = 3, g.rows_end = 3 + rows;
  g.h_ksize = h_ksize, g.v_ksize = v_ksize;
  return g;
}

// The decoded planes' bytes by hand: Y, then Cb and Cr at their subsampled sizes (rounded up).
size_t planes_bytes(const GpuJpeg& g) {
  const size_t w = g.width, h = g.height;
  if (g.planes == 1) return w * h;
  const size_t cw = (w + (size_t{1} << g.shift_x[0]) - 1) >> g.shift_x[0];
  const size_t ch = (h + (size_t{1} << g.shift_y[0]) - 1) >> g.shift_y[0];
  return w * h + 2 * cw * ch;
}

// Every region of chunk `c` as [first, end) in the device buffer, checked against the others.
void expect_disjoint_and_inside(const std::vector<GpuJpeg>& images, const JpegChunk& c,
                                int64_t size) {
  std::vector<std::pair<size_t, size_t>> regions;
  size_t taps = 0;
  for (size_t k = 0; k < c.end - c.begin; ++k) taps += jpeg_taps_count(images[c.begin + k], size);
  regions.push_back({0, (c.end - c.begin) * sizeof(cuda::ResampleJob)});
  regions.push_back({c.jobs_bytes, c.jobs_bytes + taps * sizeof(int32_t)});
  EXPECT_LE(c.jobs_bytes + taps * sizeof(int32_t), c.staged);
  size_t next_tap = 0;
  for (size_t k = 0; k < c.end - c.begin; ++k) {
    const GpuJpeg& g = images[c.begin + k];
    EXPECT_EQ(c.taps[k], next_tap) << "image " << c.begin + k;
    next_tap += jpeg_taps_count(g, size);
    regions.push_back({c.image[k], c.image[k] + planes_bytes(g)});
    regions.push_back(
        {c.rows[k], c.rows[k] + static_cast<size_t>(g.rows_end - g.rows_first) * size * 3});
    EXPECT_EQ(c.image[k] % kJpegAlign, 0u);
    EXPECT_EQ(c.rows[k] % kJpegAlign, 0u);
    EXPECT_GE(c.image[k], c.staged) << "an image over the staged jobs and taps";
  }
  std::sort(regions.begin(), regions.end());
  for (size_t r = 0; r < regions.size(); ++r) {
    EXPECT_LE(regions[r].second, c.device) << "region " << r << " past the chunk's bytes";
    if (r > 0) {
      EXPECT_LE(regions[r - 1].second, regions[r].first)
          << "regions " << r - 1 << " and " << r << " overlap";
    }
  }
}

TEST(JpegChunks, ABatchSplitsIntoChunksThatFitTheBuffersAndDoNotOverlap) {
  const int64_t size = 224;
  std::vector<GpuJpeg> images;
  uint32_t r = 7;
  auto draw = [&](int lo, int hi) {
    return lo + static_cast<int>((r = r * 1664525u + 1013904223u) >> 8) % (hi - lo + 1);
  };
  const int samplings[] = {444, 422, 420, 1};
  for (int i = 0; i < 300; ++i)
    images.push_back(image(draw(16, 1200), draw(16, 900), draw(1, 400), draw(2, 12), draw(2, 12),
                           samplings[i % 4]));
  images[17] = image(8000, 6000, 224, 70, 60);  // 144 MB decoded: more than the device buffer alone
  const size_t host_cap = kJpegChunkHostBytes, device_cap = kJpegChunkDeviceBytes;
  size_t begin = 0, chunks = 0;
  while (begin < images.size()) {
    const JpegChunk c = jpeg_chunk(images, begin, size, host_cap, device_cap);
    ASSERT_EQ(c.begin, begin);
    ASSERT_GT(c.end, begin) << "a chunk of no image";
    const size_t n = c.end - c.begin;
    ASSERT_EQ(c.taps.size(), n);
    ASSERT_EQ(c.image.size(), n);
    ASSERT_EQ(c.rows.size(), n);
    if (n > 1) {
      EXPECT_LE(c.staged, host_cap) << "chunk at " << begin;
      EXPECT_LE(c.device, device_cap) << "chunk at " << begin;
    }
    if (begin <= 17 && 17 < c.end) {
      EXPECT_EQ(n, 1u) << "the large image goes alone";
    }
    // With the next image it would not have fitted: the chunk is as large as the rule allows.
    if (c.end < images.size()) {
      const std::vector<GpuJpeg> one_more(images.begin(),
                                          images.begin() + static_cast<long>(c.end) + 1);
      const JpegChunk grown = jpeg_chunk(one_more, begin, size, SIZE_MAX, SIZE_MAX);
      EXPECT_EQ(grown.end, c.end + 1);
      EXPECT_TRUE(grown.staged > host_cap || grown.device > device_cap)
          << "chunk at " << begin << " stopped early";
    }
    expect_disjoint_and_inside(images, c, size);
    begin = c.end;
    ++chunks;
  }
  EXPECT_GT(chunks, 3u);  // the batch did not fit one chunk
}

TEST(JpegChunks, OneImageChunkIsLaidOutByTheRule) {
  // 100 x 50 4:4:4, 20 rows of 32 outputs, 3 + 4 taps per output: the layout, by hand.
  const std::vector<GpuJpeg> images = {image(100, 50, 20, 3, 4)};
  const JpegChunk c = jpeg_chunk(images, 0, 32, 0, 0);
  EXPECT_EQ(c.end, 1u);
  EXPECT_EQ(sizeof(cuda::ResampleJob), 128u);
  EXPECT_EQ(c.jobs_bytes, 256u);  // one 128-byte job, aligned
  EXPECT_EQ(jpeg_taps_count(images[0], 32), 32u * 5 + 32u * 6);
  EXPECT_EQ(c.staged, 256u + 1536u);  // 352 taps x 4 = 1408 bytes -> 1536
  EXPECT_EQ(c.image[0], c.staged);
  EXPECT_EQ(c.rows[0], c.staged + 15104u);         // 100 x 50 x 3 = 15000 -> 15104
  EXPECT_EQ(c.device, c.staged + 15104u + 2048u);  // 20 x 32 x 3 = 1920 -> 2048
  // The same image 4:2:0 (Y 100 x 50, Cb and Cr 50 x 25: 7500 -> 7680), and grayscale (5000 ->
  // 5120).
  EXPECT_EQ(jpeg_chunk({image(100, 50, 20, 3, 4, 420)}, 0, 32, 0, 0).rows[0], c.staged + 7680u);
  EXPECT_EQ(jpeg_chunk({image(100, 50, 20, 3, 4, 1)}, 0, 32, 0, 0).rows[0], c.staged + 5120u);
  // Odd sizes round the chroma planes up: 101 x 51 4:2:0 has 51 x 26 chroma (5151 + 2652 = 7803 ->
  // 7936).
  EXPECT_EQ(jpeg_chunk({image(101, 51, 20, 3, 4, 420)}, 0, 32, 0, 0).rows[0], c.staged + 7936u);
}

}  // namespace
}  // namespace dtrain::detail
