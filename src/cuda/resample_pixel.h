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

// One image: nvJPEG's planar output of the image (or of its box: src/cuda/jpeg_roi.h, whose
// MCU-aligned corner keeps the shifts below), Y at plane[0] and, for a color image,
// Cb and Cr at plane[1] and plane[2] (subsampled: pixel (x, y)'s chroma is at (x >> shift_x[c],
// y >> shift_y[c]), the replication nvJPEG's own conversion does), rows `pitch` bytes apart; the
// region starts at pixel (left, top); `mid` holds `rows` rows of size * 3 bytes (region rows
// rows_first ...); `out` takes 3 planes of size x size. Device pointers on the GPU (the struct
// itself in device memory).
struct ResampleJob {
  const uint8_t* plane[3];
  int64_t pitch[3];
  int32_t planes;  // 3, or 1 for a grayscale image (R = G = B = Y)
  int32_t left, top;
  int32_t shift_x[2], shift_y[2];  // Cb's and Cr's subsampling, as shifts
  uint8_t* mid;
  uint8_t* out;
  const int32_t* taps;  // h first[size], count[size], weights[size * h_ksize], then v likewise
  int32_t h_ksize, v_ksize, rows_first, rows, flip, pad;
};

// Where `g`'s decoded image (width x height, or its box roi_width x roi_height where set) lies in
// its decode buffer: Y at offset 0, then Cb and Cr at their subsampled sizes (rounded up); `bytes`
// in all, at most width * height * 3.
struct JpegPlanes {
  int64_t offset[3], pitch[3], rows[3];
  int64_t bytes;
};
inline JpegPlanes jpeg_planes(const detail::GpuJpeg& g) {
  JpegPlanes p{};
  const int64_t width = g.roi_width > 0 ? g.roi_width : g.width;
  const int64_t height = g.roi_width > 0 ? g.roi_height : g.height;
  for (int c = 0; c < (g.planes == 1 ? 1 : 3); ++c) {
    const int sx = c == 0 ? 0 : g.shift_x[c - 1], sy = c == 0 ? 0 : g.shift_y[c - 1];
    p.offset[c] = p.bytes;
    p.pitch[c] = ((width - 1) >> sx) + 1;
    p.rows[c] = ((height - 1) >> sy) + 1;
    p.bytes += p.pitch[c] * p.rows[c];
  }
  return p;
}

// The job of `g` (src/cuda/jpeg_batch.h), whose image (or box), decoded as jpeg_planes() lays it
// out, is at `image`, whose taps are at `taps` (g.taps counted already), and whose output batch is
// `batch`.
inline ResampleJob resample_job(const detail::GpuJpeg& g, uint8_t* image, uint8_t* mid,
                                uint8_t* batch, const int32_t* taps, int64_t size) {
  const JpegPlanes p = jpeg_planes(g);
  ResampleJob j{};
  j.planes = g.planes == 1 ? 1 : 3;
  for (int c = 0; c < j.planes; ++c) j.plane[c] = image + p.offset[c], j.pitch[c] = p.pitch[c];
  j.left = g.left, j.top = g.top;
  for (int c = 0; c < 2; ++c) j.shift_x[c] = g.shift_x[c], j.shift_y[c] = g.shift_y[c];
  j.mid = mid;
  j.out = batch + g.slot * 3 * size * size;
  j.taps = taps;
  j.h_ksize = g.h_ksize, j.v_ksize = g.v_ksize;
  j.rows_first = g.rows_first, j.rows = g.rows_end - g.rows_first;
  j.flip = g.flip ? 1 : 0, j.pad = 0;
  return j;
}

// JFIF's YCbCr to RGB as libjpeg-turbo converts (jdcolor.c: 16-bit fixed point, rounded, the
// green term's half added once, clamped to 0..255), so the GPU path's colors are the CPU path's
// for the same Y, Cb and Cr.
DTRAIN_HOST_DEVICE uint8_t clamp255(int32_t v) {
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}
DTRAIN_HOST_DEVICE void ycc_to_rgb(int32_t y, int32_t cb, int32_t cr, int32_t& r, int32_t& g,
                                   int32_t& b) {
  constexpr int32_t kHalf = 1 << 15;
  cb -= 128, cr -= 128;
  r = clamp255(y + ((91881 * cr + kHalf) >> 16));                // FIX(1.40200)
  g = clamp255(y + ((-22554 * cb + kHalf - 46802 * cr) >> 16));  // FIX(0.34414), FIX(0.71414)
  b = clamp255(y + ((116130 * cb + kHalf) >> 16));               // FIX(1.77200)
}

constexpr int kPrecisionBits = 22;  // PIL's PRECISION_BITS for 8-bit images

DTRAIN_HOST_DEVICE uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// mid[r][x] = the horizontal taps of output column x over region row rows_first + r, each source
// pixel converted to RGB first.
DTRAIN_HOST_DEVICE void horizontal_pixel(const ResampleJob& j, int size, int x, int r) {
  const int32_t* first = j.taps;
  const int32_t* count = first + size;
  const int32_t* w = count + size + static_cast<int64_t>(x) * j.h_ksize;
  const int32_t f = first[x], n = count[x];
  const int64_t row = j.top + j.rows_first + r;
  const int32_t x0 = j.left + f;
  const uint8_t* luma = j.plane[0] + row * j.pitch[0];
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  if (j.planes == 1) {
    for (int k = 0; k < n; ++k) {
      const int32_t v = luma[x0 + k] * w[k];
      s0 += v, s1 += v, s2 += v;
    }
  } else {
    const uint8_t* cb = j.plane[1] + (row >> j.shift_y[0]) * j.pitch[1];
    const uint8_t* cr = j.plane[2] + (row >> j.shift_y[1]) * j.pitch[2];
    for (int k = 0; k < n; ++k) {
      const int32_t at = x0 + k;
      int32_t red, green, blue;
      ycc_to_rgb(luma[at], cb[at >> j.shift_x[0]], cr[at >> j.shift_x[1]], red, green, blue);
      const int32_t wk = w[k];
      s0 += red * wk, s1 += green * wk, s2 += blue * wk;
    }
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
