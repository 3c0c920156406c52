// PIL's bilinear resampling of a batch of images on the GPU (resample.cu): CUDA runtime only,
// for the GPU JPEG decoder (jpeg_batch.cpp). The taps come from the host (src/data/
// image_transforms.h's plan_taps, laid out as src/cuda/jpeg_batch.h's GpuJpeg says), so the
// arithmetic is the CPU Resampler's: int32 sums of uint8 x 22-bit weights, a half added, shifted
// and clipped, the horizontal pass rounded to uint8 before the vertical one, as PIL does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtrain::cuda {

// One image: `src` points at the region's top-left pixel of interleaved RGB rows `src_pitch`
// bytes apart; `mid` holds `rows` rows of size * 3 bytes (region rows rows_first ...); `out`
// takes 3 planes of size x size. Device pointers, the struct itself in device memory.
struct ResampleJob {
  const uint8_t* src;
  int64_t src_pitch;
  uint8_t* mid;
  uint8_t* out;
  const int32_t* taps;  // h first[size], count[size], weights[size * h_ksize], then v likewise
  int32_t h_ksize, v_ksize, rows_first, rows, flip, pad;
};

// Both passes for `n` jobs on `stream`; `max_rows` is the largest jobs[i].rows.
cudaError_t resample_batch(const ResampleJob* jobs, int n, int size, int max_rows, cudaStream_t stream);

}  // namespace dtrain::cuda
