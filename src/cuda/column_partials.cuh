// Per-channel sums over rows, deterministic and in one launch: each block of a column tile
// writes its partial sums of two quantities, and the tile's last block to finish (found with a
// ticket counter it resets to 0, so that a captured CUDA graph replays correctly) folds them in
// double and in block order. Used by the fused BatchNorm's reductions (batch_norm.cu); blocks of
// kColumnThreads threads at most, threadIdx.x across the tile's channel vectors (at most
// kColumnMaxVectors of kColumnMaxVec channels), threadIdx.y down the rows.
#pragma once

#include <cstdint>

namespace dtrain::cuda {

constexpr int kColumnThreads = 512;
constexpr int kColumnMaxVec = 8;      // channels a thread: 16 bytes of fp16/bf16
constexpr int kColumnMaxVectors = 8;  // threads across a column tile: 64 bf16 channels at most

// The block's per-channel sums of two quantities (a, b: V values of each thread) over its rows,
// written to part[(blockIdx.y * 2 + q) * c + channel]; then whether this block is the column
// tile's last to finish (every other block's partials visible to it).
template <int V>
__device__ bool block_partials(const float (&a)[V], const float (&b)[V], float* part, int c,
                               unsigned* counters) {
  __shared__ float red[2 * kColumnThreads * kColumnMaxVec];
  __shared__ bool last;
  const int tile = blockDim.x * V, col0 = blockIdx.x * tile;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    red[(0 * blockDim.y + threadIdx.y) * tile + threadIdx.x * V + i] = a[i];
    red[(1 * blockDim.y + threadIdx.y) * tile + threadIdx.x * V + i] = b[i];
  }
  __syncthreads();
  for (int e = tid; e < 2 * tile; e += nthreads) {
    const int q = e / tile, j = e % tile;
    float s = 0.f;
    for (int r = 0; r < static_cast<int>(blockDim.y); ++r)
      s += red[(q * blockDim.y + r) * tile + j];
    if (col0 + j < c) part[(static_cast<int64_t>(blockIdx.y) * 2 + q) * c + col0 + j] = s;
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(counters + blockIdx.x, 1u) == gridDim.y - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// In the last block of a column tile: the sums over every block's partials, in double and in
// block order, of channel col0 + tid into (sa, sb) for the threads tid < tile that hold a channel
// (the return value); resets the tile's ticket counter.
template <int V>
__device__ bool fold(const float* part, int c, unsigned* counters, double& sa, double& sb) {
  __shared__ double sums[kColumnThreads];
  const int tile = blockDim.x * V, col0 = blockIdx.x * tile;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  const int entries = 2 * tile;  // <= 2 * kColumnMaxVectors * kColumnMaxVec = 128 <= nthreads
  const int lanes = nthreads / entries;
  const int e = tid % entries, lane = tid / entries;
  const int q = e / tile, j = e % tile;
  if (lane < lanes) {
    double acc[4] = {0, 0, 0, 0};
    if (col0 + j < c) {
      const float* p = part + static_cast<int64_t>(q) * c + col0 + j;
      const int64_t stride = 2 * static_cast<int64_t>(c);
      int g = lane;
      for (; g + 3 * lanes < static_cast<int>(gridDim.y); g += 4 * lanes) {
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[k] += __ldcg(p + (g + k * lanes) * stride);
      }
      for (; g < static_cast<int>(gridDim.y); g += lanes) acc[0] += __ldcg(p + g * stride);
    }
    sums[lane * entries + e] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  __syncthreads();
  if (tid == 0) counters[blockIdx.x] = 0;  // the next launch's tickets start again
  if (tid >= tile || col0 + tid >= c) return false;
  sa = 0, sb = 0;
  for (int l = 0; l < lanes; ++l) {
    sa += sums[l * entries + tid];
    sb += sums[l * entries + tile + tid];
  }
  return true;
}

}  // namespace dtrain::cuda
