// The box of a JPEG that the GPU decoder decodes when nvJPEG can decode a region (Note [GPU
// decoding]: only what the random-resized crop keeps): plain C++ with no CUDA header, so that
// tests/unit/test_gpu_taps.cpp checks on a CPU machine that resampling from the box gives the
// bytes resampling from the whole image gives.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/jpeg_batch.h"

namespace dtrain::detail {

// Sets g's box (roi_x, roi_y, roi_width, roi_height) to the pixels its resampling reads, widened
// to whole MCUs (8 pixels times the chroma subsampling: a 4:2:0 box starts on 16, so that a
// pixel's chroma sits at the box's own (x >> shift, y >> shift)) and clipped to the image, and
// moves left and top to count from the box's corner; the box stays unset (the whole image) where
// it would be the whole image. `taps` is g's tap table (jpeg_batch.h's layout, size output
// columns first). Applied once, to an image whose box is unset.
inline void jpeg_roi(GpuJpeg& g, const int32_t* taps, int64_t size) {
  const int32_t* first = taps;
  const int32_t* count = taps + size;
  int64_t x_begin = INT64_MAX, x_end = 0;
  for (int64_t x = 0; x < size; ++x) {
    if (count[x] <= 0) continue;
    x_begin = std::min<int64_t>(x_begin, g.left + first[x]);
    x_end = std::max<int64_t>(x_end, g.left + first[x] + count[x]);
  }
  if (x_begin >= x_end) return;
  const int64_t y_begin = static_cast<int64_t>(g.top) + g.rows_first;
  const int64_t y_end = static_cast<int64_t>(g.top) + g.rows_end;
  const int color = g.planes == 1 ? 0 : 1;
  const int64_t mcu_x = int64_t{8} << (color * std::max(g.shift_x[0], g.shift_x[1]));
  const int64_t mcu_y = int64_t{8} << (color * std::max(g.shift_y[0], g.shift_y[1]));
  const int64_t x0 = x_begin / mcu_x * mcu_x, y0 = y_begin / mcu_y * mcu_y;
  const int64_t x1 = std::min<int64_t>(g.width, (x_end + mcu_x - 1) / mcu_x * mcu_x);
  const int64_t y1 = std::min<int64_t>(g.height, (y_end + mcu_y - 1) / mcu_y * mcu_y);
  if (x0 == 0 && y0 == 0 && x1 == g.width && y1 == g.height) return;
  g.roi_x = static_cast<int32_t>(x0), g.roi_y = static_cast<int32_t>(y0);
  g.roi_width = static_cast<int32_t>(x1 - x0), g.roi_height = static_cast<int32_t>(y1 - y0);
  g.left -= g.roi_x, g.top -= g.roi_y;
}

}  // namespace dtrain::detail
