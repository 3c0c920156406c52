// PIL's bilinear resampling of a batch of images on the GPU (resample.cu): CUDA runtime only,
// for the GPU JPEG decoder (jpeg_batch.cpp). The taps come from the host (src/data/
// image_transforms.h's plan_taps, laid out as src/cuda/jpeg_batch.h's GpuJpeg says), so the
// arithmetic is the CPU Resampler's; each thread's work is src/cuda/resample_pixel.h's, which the
// CPU tests run on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/resample_pixel.h"

namespace dtrain::cuda {

// Both passes for `n` jobs (ResampleJob, in device memory) on `stream`; `max_rows` is the largest
// jobs[i].rows.
cudaError_t resample_batch(const ResampleJob* jobs, int n, int size, int max_rows,
                           cudaStream_t stream);

}  // namespace dtrain::cuda
