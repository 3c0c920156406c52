// Column sums of a row-major (rows, cols) matrix in fp32: the bias gradient of a Linear layer
// (the sum over every row of the output gradient), and the last step of the LayerNorm
// backward's weight and bias gradients. Two passes, each summing in a fixed order, so the result
// is deterministic (no atomics):
//   1. blocks of 32 x 8 threads; each thread sums 16 bytes of columns (8 bf16, 4 fp32) over
//      every eighth row of its block's share of the rows; the 8 row lanes are summed in shared
//      memory into one partial row per block row-split: part (splits, cols);
//   2. sum_partials: out[c] = sum over the splits of part[s][c], one block per 32 columns with
//      8 row lanes summed in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/column_sum.h"
#include "cuda/element_types.cuh"

namespace dtrain::cuda {
namespace {

constexpr int kLanes = 32;  // threads across columns
constexpr int kRows = 8;    // threads across rows
constexpr int kTargetBlocks = 528;

// kVec columns per thread: 16 / sizeof(T) with aligned 16-byte loads, or 1.
template <typename T, int kVec>
__global__ void __launch_bounds__(kLanes* kRows)
    column_partials(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t rows_per_split,
                    float* __restrict__ part) {
  __shared__ float acc_s[kRows][kLanes * kVec];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x) * kVec;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r_end = r_begin + rows_per_split < rows ? r_begin + rows_per_split : rows;
  float acc[kVec];
#pragma unroll
  for (int v = 0; v < kVec; ++v) acc[v] = 0.f;
  if (c0 < cols) {
    for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kRows) {
      const T* p = x + r * cols + c0;
      if constexpr (kVec > 1) {
        union {
          uint4 raw;
          T el[kVec];
        } u;
        u.raw = *reinterpret_cast<const uint4*>(p);
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] += to_float(u.el[v]);
      } else {
        acc[0] += to_float(*p);
      }
    }
  }
#pragma unroll
  for (int v = 0; v < kVec; ++v) acc_s[threadIdx.y][threadIdx.x * kVec + v] = acc[v];
  __syncthreads();
  // Thread (x, y) sums the 8 row lanes of columns y*32 + x, (y + 8)*32 + x, ... of the tile.
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kLanes * kVec;
  for (int i = threadIdx.y * kLanes + threadIdx.x; i < kLanes * kVec; i += kLanes * kRows) {
    if (tile0 + i >= cols) continue;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kRows; ++k) s += acc_s[k][i];
    part[static_cast<int64_t>(blockIdx.y) * cols + tile0 + i] = s;
  }
}

__global__ void __launch_bounds__(kLanes* kRows)
    partial_sums(const float* __restrict__ part, int splits, int64_t width, int64_t split_at,
                 float* __restrict__ out0, float* __restrict__ out1) {
  __shared__ float acc_s[kRows][kLanes];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x;
  float s = 0.f;
  if (c < width)
    for (int k = threadIdx.y; k < splits; k += kRows)
      s += part[static_cast<int64_t>(k) * width + c];
  acc_s[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= width) return;
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < kRows; ++k) total += acc_s[k][threadIdx.x];
  if (c < split_at) {
    out0[c] = total;
  } else {
    out1[c - split_at] = total;
  }
}

template <typename T>
cudaError_t run_column_sum(const T* x, int64_t rows, int64_t cols, float* part, int splits,
                           float* out, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = cols % kVec == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int per_thread = vec ? kVec : 1;
  const auto tiles =
      static_cast<unsigned>((cols + kLanes * per_thread - 1) / (kLanes * per_thread));
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  const dim3 grid(tiles, static_cast<unsigned>(splits)), block(kLanes, kRows);
  if (vec) {
    column_partials<T, kVec><<<grid, block, 0, stream>>>(x, rows, cols, rows_per_split, part);
  } else {
    column_partials<T, 1><<<grid, block, 0, stream>>>(x, rows, cols, rows_per_split, part);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return sum_partials(part, splits, cols, cols, out, nullptr, stream);
}

}  // namespace

int column_sum_splits(int64_t rows, int64_t cols, int element_bytes) {
  if (rows <= 0 || cols <= 0) return 1;
  const int64_t per_block = kLanes * (16 / element_bytes);
  const int64_t tiles = (cols + per_block - 1) / per_block;
  int64_t splits = (kTargetBlocks + tiles - 1) / tiles;
  const int64_t most = (rows + kRows - 1) / kRows;  // at least 8 rows a split
  if (splits > most) splits = most;
  if (splits > 256) splits = 256;
  return static_cast<int>(splits < 1 ? 1 : splits);
}

cudaError_t column_sum(int dtype, const void* x, int64_t rows, int64_t cols, float* part,
                       int splits, float* out, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  if (rows <= 0) return cudaMemsetAsync(out, 0, static_cast<size_t>(cols) * sizeof(float), stream);
  switch (dtype) {
    case 0:
      return run_column_sum(static_cast<const float*>(x), rows, cols, part, splits, out, stream);
    case 1:
      return run_column_sum(static_cast<const __half*>(x), rows, cols, part, splits, out, stream);
    case 2:
      return run_column_sum(static_cast<const __nv_bfloat16*>(x), rows, cols, part, splits, out,
                            stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t sum_partials(const float* part, int splits, int64_t width, int64_t split_at,
                         float* out0, float* out1, cudaStream_t stream) {
  if (width <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>((width + kLanes - 1) / kLanes);
  partial_sums<<<blocks, dim3(kLanes, kRows), 0, stream>>>(part, splits, width, split_at, out0,
                                                           out1);
  return cudaGetLastError();
}

}  // namespace dtrain::cuda
