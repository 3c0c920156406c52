// Column sums on the GPU (column_sum.cu): CUDA runtime only, for dtrain's kernels and their
// LibTorch wrappers. dtype codes: 0 fp32, 1 fp16, 2 bf16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtrain::cuda {

// How many row splits column_sum uses for a (rows, cols) matrix of `element_bytes` elements:
// the partial buffer it needs is splits x cols floats.
int column_sum_splits(int64_t rows, int64_t cols, int element_bytes);
// out[c] = sum over rows of x[r][c] (fp32), through `part` (splits x cols floats).
cudaError_t column_sum(int dtype, const void* x, int64_t rows, int64_t cols, float* part,
                       int splits, float* out, cudaStream_t stream);
// Sums `splits` rows of `width` partials: column i goes to out0[i] for i < split_at, else to
// out1[i - split_at]. Deterministic (a fixed order).
cudaError_t sum_partials(const float* part, int splits, int64_t width, int64_t split_at,
                         float* out0, float* out1, cudaStream_t stream);

}  // namespace dtrain::cuda
