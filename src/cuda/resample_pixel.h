// One image's resampling job for the GPU JPEG decoder and the work of one thread of each of
// resample.cu's two passes, written once: the kernels call these functions on the GPU, and
// tests/unit/test_gpu_taps.cpp calls the same functions on the host (a CPU build has no CUDA
// compiler), so the host test checks the kernels' own arithmetic and indexing against the CPU
// Resampler, byte for byte. No CUDA header and no test of the compiler: resample.cu defines
// DTRAIN_HOST_DEVICE as `__host__ __device__ __forceinline__` before it includes this header;
// every other includer gets the same functions as plain inline C++.
// The arithmetic is PIL's bilinear filter as the CPU Resampler does it: int32 sums of uint8 x
// 22-bit weights from a half, shifted and clipped; the horizontal pass rounded to uint8 before
// the vertical one.
#pragma once

#include <cstdint>

#include "cuda/jpeg_batch.h"

#ifndef DTRAIN_HOST_DEVICE
#define DTRAIN_HOST_DEVICE inline
#endif

namespace dtrain::cuda {

// One image: `src` points at the region's top-left pixel of interleaved RGB rows `src_pitch`
// bytes apart; `mid` holds `rows` rows of size * 3 bytes (region rows rows_first ...); `out`
// takes 3 planes of size x size. Device pointers on the GPU (the struct itself in device memory).
struct ResampleJob {
  const uint8_t* src;
  int64_t src_pitch;
  uint8_t* mid;
  uint8_t* out;
  const int32_t* taps;  // h first[size], count[size], weights[size * h_ksize], then v likewise
  int32_t h_ksize, v_ksize, rows_first, rows, flip, pad;
};

// The job of `g` (src/cuda/jpeg_batch.h), whose whole image, decoded as interleaved RGB, is at
// `image`, whose taps are at `taps` (g.taps counted already), and whose output batch is `batch`.
inline ResampleJob resample_job(const detail::GpuJpeg& g, const uint8_t* image, uint8_t* mid, uint8_t* batch,
                                const int32_t* taps, int64_t size) {
  const auto pitch = static_cast<int64_t>(g.width) * 3;
  ResampleJob j{};
  j.src = image + g.top * pitch + static_cast<int64_t>(g.left) * 3;
  j.src_pitch = pitch;
  j.mid = mid;
  j.out = batch + g.slot * 3 * size * size;
  j.taps = taps;
  j.h_ksize = g.h_ksize, j.v_ksize = g.v_ksize;
  j.rows_first = g.rows_first, j.rows = g.rows_end - g.rows_first;
  j.flip = g.flip ? 1 : 0, j.pad = 0;
  return j;
}

constexpr int kPrecisionBits = 22;  // PIL's PRECISION_BITS for 8-bit images

DTRAIN_HOST_DEVICE uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// mid[r][x] = the horizontal taps of output column x over region row rows_first + r.
DTRAIN_HOST_DEVICE void horizontal_pixel(const ResampleJob& j, int size, int x, int r) {
  const int32_t* first = j.taps;
  const int32_t* count = first + size;
  const int32_t* w = count + size + static_cast<int64_t>(x) * j.h_ksize;
  const int32_t f = first[x], n = count[x];
  const uint8_t* p = j.src + static_cast<int64_t>(j.rows_first + r) * j.src_pitch + static_cast<int64_t>(f) * 3;
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int k = 0; k < n; ++k) {
    const int32_t wk = w[k];
    s0 += p[k * 3 + 0] * wk;
    s1 += p[k * 3 + 1] * wk;
    s2 += p[k * 3 + 2] * wk;
  }
  uint8_t* m = j.mid + (static_cast<int64_t>(r) * size + x) * 3;
  m[0] = clip8(s0), m[1] = clip8(s1), m[2] = clip8(s2);
}

// out[c][y][x'] = the vertical taps of output row y over mid's column x (x' mirrored when
// flipping).
DTRAIN_HOST_DEVICE void vertical_pixel(const ResampleJob& j, int size, int x, int y) {
  const int32_t* first = j.taps + static_cast<int64_t>(size) * (2 + j.h_ksize);
  const int32_t* count = first + size;
  const int32_t* w = count + size + static_cast<int64_t>(y) * j.v_ksize;
  const int32_t f = first[y] - j.rows_first, n = count[y];
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int k = 0; k < n; ++k) {
    const uint8_t* m = j.mid + (static_cast<int64_t>(f + k) * size + x) * 3;
    const int32_t wk = w[k];
    s0 += m[0] * wk;
    s1 += m[1] * wk;
    s2 += m[2] * wk;
  }
  const int d = j.flip ? size - 1 - x : x;
  const int64_t plane = static_cast<int64_t>(size) * size;
  uint8_t* o = j.out + static_cast<int64_t>(y) * size + d;
  o[0] = clip8(s0), o[plane] = clip8(s1), o[2 * plane] = clip8(s2);
}

}  // namespace dtrain::cuda
