// How the GPU JPEG decoder (jpeg_batch.cpp) splits a batch into chunks and lays each out in its
// two buffers: plain C++ with no CUDA header, so that tests/unit/test_jpeg_chunks.cpp checks on a
// CPU machine what the decoder does on the GPU (every chunk within the buffers, no two regions
// overlapping). The decoder reserves at least `staged` pinned host bytes and `device` device
// bytes, writes the jobs and taps to the host buffer, copies them to the start of the device
// buffer in one copy, and points nvJPEG and the kernels at the offsets below.
//   host:   [jobs][taps]
//   device: [jobs][taps][image begin ... image end - 1][rows begin ... rows end - 1]
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/jpeg_batch.h"
#include "cuda/resample_pixel.h"

namespace dtrain::detail {

constexpr size_t kJpegChunkDeviceBytes = size_t{64} << 20;  // decoded images + row buffers
constexpr size_t kJpegChunkHostBytes = size_t{4} << 20;     // jobs + taps
constexpr size_t kJpegAlign = 256;                          // every region starts on it

inline size_t jpeg_aligned(size_t n) { return (n + kJpegAlign - 1) / kJpegAlign * kJpegAlign; }

// The int32 taps of one image, as gpu_jpeg() lays them out (src/cuda/jpeg_batch.h).
inline size_t jpeg_taps_count(const GpuJpeg& g, int64_t size) {
  return static_cast<size_t>(size * (2 + g.h_ksize) + size * (2 + g.v_ksize));
}

struct JpegChunk {
  size_t begin = 0, end = 0;  // the images [begin, end) of the batch
  size_t jobs_bytes = 0;      // (end - begin) ResampleJobs, aligned
  size_t staged = 0;          // jobs and taps: the host buffer's bytes, mirrored on the device
  size_t device = 0;          // the device buffer's bytes: staged, then images and row buffers
  std::vector<size_t> taps;   // per image: its taps' first int32 after the jobs
  std::vector<size_t> image;  // per image: its decoded planes' first byte in the device buffer
  std::vector<size_t> rows;   // per image: its row buffer's first byte in the device buffer
};

// The chunk that starts at image `begin`: as many images as fit `host_cap` and `device_cap`
// bytes, at least one (a single image that needs more makes the decoder grow its buffers).
inline JpegChunk jpeg_chunk(const std::vector<GpuJpeg>& images, size_t begin, int64_t size,
                            size_t host_cap, size_t device_cap) {
  const auto s = static_cast<size_t>(size);
  // An image's decoded planes (cuda::jpeg_planes()): 1.5 bytes a pixel for 4:2:0, 3 for 4:4:4.
  auto image_bytes = [&](const GpuJpeg& g) {
    return jpeg_aligned(static_cast<size_t>(cuda::jpeg_planes(g).bytes));
  };
  auto rows_bytes = [&](const GpuJpeg& g) {
    return jpeg_aligned(static_cast<size_t>(g.rows_end - g.rows_first) * s * 3);
  };
  JpegChunk c;
  c.begin = c.end = begin;
  size_t taps_bytes = 0, pixels_bytes = 0;
  while (c.end < images.size()) {
    const GpuJpeg& g = images[c.end];
    const size_t t = taps_bytes + jpeg_taps_count(g, size) * sizeof(int32_t);
    const size_t host =
        jpeg_aligned((c.end - begin + 1) * sizeof(cuda::ResampleJob)) + jpeg_aligned(t);
    const size_t device = host + pixels_bytes + image_bytes(g) + rows_bytes(g);
    if (c.end > begin && (host > host_cap || device > device_cap)) break;
    taps_bytes = t, pixels_bytes += image_bytes(g) + rows_bytes(g);
    ++c.end;
  }
  c.jobs_bytes = jpeg_aligned((c.end - begin) * sizeof(cuda::ResampleJob));
  c.staged = c.jobs_bytes + jpeg_aligned(taps_bytes);
  c.device = c.staged + pixels_bytes;
  size_t tap = 0, at = c.staged;
  for (size_t k = begin; k < c.end; ++k) {
    c.taps.push_back(tap);
    tap += jpeg_taps_count(images[k], size);
    c.image.push_back(at);
    at += image_bytes(images[k]);
  }
  for (size_t k = begin; k < c.end; ++k) {
    c.rows.push_back(at);
    at += rows_bytes(images[k]);
  }
  return c;
}

}  // namespace dtrain::detail
