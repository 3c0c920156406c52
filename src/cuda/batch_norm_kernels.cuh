// The fused BatchNorm's kernels (Note [fused BatchNorm] in cuda/fused_batch_norm.h), included by
// batch_norm.cu alone, which launches them. x is rows of C channels (rows = N·H·W). Each thread
// owns V adjacent channels of a column tile (16-byte loads when C is a multiple of V and the
// tensors are aligned, else V = 1) and walks rows:
//   bn_stats        sums of (x - x[0]) and its square per channel  -> block partials; the last
//                   block: mean, 1/std, scale, shift, running statistics, num_batches_tracked
//   bn_apply        y = relu(x * scale + shift + r)
//   bn_bwd_reduce   g = dy [+ dy2, a forked output's second use] (0 where y = 0 under ReLU;
//                   written out as the shortcut's gradient),
//                   sums of g and g * (x - mean) -> partials; the last block: dweight, dbias and
//                   k1, kx, kb of dx = k1 g + kx (x - mean) + kb
//   bn_sync_stats, bn_bwd_coefficients   SyncBatchNorm: what the reductions' last blocks
//                   would finish, from every rank's values after the exchange
//   bn_bwd_dx       dx
// The backward finds the ReLU's zeros in y, in one bit per element the forward wrote (with a
// shortcut), or from x * scale + shift recomputed (without one): the last two spare reading y.
// Partials are summed in a fixed order (within a block by row, across blocks in double by block
// index: column_partials.cuh): the same inputs give the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/batch_norm_args.h"
#include "cuda/column_partials.cuh"
#include "cuda/element_types.cuh"
#include "cuda/packs.cuh"

namespace dtrain::cuda {
namespace {

constexpr int kReduceThreads = kColumnThreads;
constexpr int kApplyThreads = 256;
constexpr int kMaxTileX = kColumnMaxVectors;  // threads across a column tile
constexpr int kUnroll = 4;                    // rows loaded before any is summed

// ReLU as torch.relu: NaN stays NaN.
__device__ __forceinline__ float relu(float v) { return v <= 0.f ? 0.f : v; }

// What a training forward's batch statistics (channel `ch`: mean, biased variance, over n rows)
// give: the mean and 1/std it normalizes with, scale and shift, the running statistics as
// torch.nn.BatchNorm2d updates them (momentum, the unbiased variance), num_batches_tracked + 1.
__device__ void finish_statistics(const BnForwardArgs& a, int ch, double mean, double var,
                                  double n) {
  const float meanf = static_cast<float>(mean);
  const float invstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(a.eps)));
  const float scale = a.weight[ch] * invstd;
  a.mean[ch] = meanf;
  a.invstd[ch] = invstd;
  a.scale[ch] = scale;
  a.shift[ch] = a.bias[ch] - meanf * scale;
  const float m = a.momentum;
  a.running_mean[ch] = (1.f - m) * a.running_mean[ch] + m * meanf;
  a.running_var[ch] = (1.f - m) * a.running_var[ch] + m * static_cast<float>(var * n / (n - 1));
  if (ch == 0) *a.batches += 1;
}

template <typename T, int V>
__global__ void __launch_bounds__(kReduceThreads, 2)
    bn_stats(const T* __restrict__ x, BnForwardArgs a) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  const int c = a.c;
  float shift[V], s[V], q[V];
#pragma unroll
  for (int i = 0; i < V; ++i) shift[i] = s[i] = q[i] = 0.f;
  if (col < c) {
    load<T, V>(x + col, shift);
    const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    for (; r + (kUnroll - 1) * step < a.rows; r += kUnroll * step) {
      Pack<T, V> v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) v[k] = fetch<T, V>(x + (r + k * step) * c + col);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float d = value(v[k], i) - shift[i];
          s[i] += d;
          q[i] = fmaf(d, d, q[i]);
        }
    }
    for (; r < a.rows; r += step) {
      float v[V];
      load<T, V>(x + r * c + col, v);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v[i] - shift[i];
        s[i] += d;
        q[i] = fmaf(d, d, q[i]);
      }
    }
  }
  if (!block_partials<V>(s, q, a.part, c, a.counters)) return;
  double sum, sq;
  if (!fold<V>(a.part, c, a.counters, sum, sq)) return;
  const int ch = blockIdx.x * blockDim.x * V + threadIdx.y * blockDim.x + threadIdx.x;
  const double n = static_cast<double>(a.rows);
  const double dm = sum / n;
  if (a.local != nullptr) {  // SyncBatchNorm: this rank's values, merged after the exchange
    const double m2 = sq - sum * dm;
    a.local[ch] = static_cast<double>(to_float(x[ch])) + dm;
    a.local[c + ch] = m2 > 0 ? m2 : 0;
    if (ch == 0) a.local[2 * c] = n;
    return;
  }
  double var = sq / n - dm * dm;  // biased, of the shifted values: the same variance
  if (var < 0) var = 0;
  finish_statistics(a, ch, static_cast<double>(to_float(x[ch])) + dm, var, n);
}

// SyncBatchNorm: every rank's (mean, sum of squared deviations, rows) of a channel merged in rank
// order (Chan's formula, in double: the same bits on every rank), then what bn_stats's last block
// writes, with the rows over every rank (unbiased running variance), and those rows in count.
__global__ void bn_sync_stats(BnForwardArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  const int64_t width = 2 * static_cast<int64_t>(a.c) + 1;
  double n = 0, weighted = 0;
  for (int r = 0; r < a.world; ++r) {
    const double* g = a.gathered + r * width;
    n += g[2 * a.c];
    weighted += g[2 * a.c] * g[ch];
  }
  const double mean = weighted / n;
  double m2 = 0;
  for (int r = 0; r < a.world; ++r) {
    const double* g = a.gathered + r * width;
    const double d = g[ch] - mean;
    m2 += g[a.c + ch] + g[2 * a.c] * d * d;
  }
  finish_statistics(a, ch, mean, m2 / n, n);
  if (ch == 0) *a.count = n;
}

// Eval: mean and 1/std from the running statistics, and the scale and shift they give.
__global__ void bn_eval_coefficients(BnForwardArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  const float mean = a.running_mean[ch];
  const float invstd = rsqrtf(a.running_var[ch] + a.eps);
  const float scale = a.weight[ch] * invstd;
  a.mean[ch] = mean;
  a.invstd[ch] = invstd;
  a.scale[ch] = scale;
  a.shift[ch] = a.bias[ch] - mean * scale;
}

// Channels a byte of the ReLU mask covers: one 16-byte vector of T.
template <typename T>
constexpr int kMaskChannels = 16 / static_cast<int>(sizeof(T));

// Whether the stored value is above 0: the ReLU mask as the y it is written into says it.
template <typename T>
__device__ __forceinline__ bool positive(float v) {
  return to_float(from_float<T>(v)) > 0.f;
}

template <typename T, int V, bool Residual, bool Relu, bool Bits>
__global__ void __launch_bounds__(kApplyThreads)
    bn_apply(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ y,
             uint8_t* __restrict__ bits, const float* __restrict__ scale,
             const float* __restrict__ shift, int64_t rows, int c) {
  static_assert(!Bits || V == kMaskChannels<T>, "a thread writes whole bytes of the mask");
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  float sc[V], sh[V];
  load<float, V>(scale + col, sc);
  load<float, V>(shift + col, sh);
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += step) {
    const int64_t at = r * c + col;
    float v[V], rv[V];
    load<T, V>(x + at, v);
    if (Residual) load<T, V>(res + at, rv);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float o = fmaf(v[i], sc[i], sh[i]);
      if (Residual) o += rv[i];
      v[i] = Relu ? relu(o) : o;
    }
    store<T, V>(y + at, v);
    if (Bits) {
      unsigned byte = 0;
#pragma unroll
      for (int i = 0; i < V; ++i) byte |= positive<T>(v[i]) ? 1u << i : 0u;
      bits[r * (c / V) + col / V] = static_cast<uint8_t>(byte);
    }
  }
}

// Where the backward finds the ReLU's mask (BnMask in batch_norm_args.h): 0 none (no ReLU or
// dy masked already), 1 y > 0, 2 the forward's bits, 3 x * scale + shift > 0 recomputed (no
// shortcut). Each gives the zeros of y exactly.
template <typename T, int V, int M>
struct MaskReader {
  float sc[V], sh[V];
  __device__ void init(const BnBackwardArgs& a, int col) {
    if (M == 3) {
      load<float, V>(a.scale + col, sc);
      load<float, V>(a.shift + col, sh);
    }
  }
  // Zeroes g[i] where y is 0, for the row `r` at element offset `at`; xv: x's values there.
  __device__ void apply(const BnBackwardArgs& a, const T* y, int64_t r, int64_t at, int col,
                        const float (&xv)[V], float (&g)[V]) const {
    if (M == 1) {
      const Pack<T, V> py = fetch<T, V>(y + at);
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (!(value(py, i) > 0.f)) g[i] = 0.f;
    } else if (M == 2) {
      constexpr int kB = kMaskChannels<T>;
      const unsigned byte = a.bits[r * (a.c / kB) + col / kB] >> (col % kB);
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (!((byte >> i) & 1u)) g[i] = 0.f;
    } else if (M == 3) {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (!positive<T>(relu(fmaf(xv[i], sc[i], sh[i])))) g[i] = 0.f;
    }
  }
};

template <typename T, int V, int M, bool WriteG, bool Two>
__global__ void __launch_bounds__(kReduceThreads, 2)
    bn_bwd_reduce(const T* __restrict__ dy, const T* __restrict__ dy2, const T* __restrict__ y,
                  const T* __restrict__ x, T* __restrict__ g_out, BnBackwardArgs a) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  const int c = a.c;
  float mean[V], sg[V], sgx[V];
#pragma unroll
  for (int i = 0; i < V; ++i) mean[i] = sg[i] = sgx[i] = 0.f;
  MaskReader<T, V, M> mask;
  if (col < c) {
    load<float, V>(a.mean + col, mean);
    mask.init(a, col);
    const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    // One row an iteration: its two or three loads are in flight together, and 1,024 threads
    // a multiprocessor keep enough bytes in flight.
    for (; r < a.rows; r += step) {
      const int64_t at = r * c + col;
      const Pack<T, V> pg = fetch<T, V>(dy + at);
      Pack<T, V> pg2;
      if (Two) pg2 = fetch<T, V>(dy2 + at);
      const Pack<T, V> px = fetch<T, V>(x + at);
      float g[V], xv[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        g[i] = value(pg, i);
        if (Two) g[i] += value(pg2, i);
        xv[i] = value(px, i);
      }
      mask.apply(a, y, r, at, col, xv, g);
      if (WriteG) store<T, V>(g_out + at, g);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        sg[i] += g[i];
        sgx[i] = fmaf(g[i], xv[i] - mean[i], sgx[i]);
      }
    }
  }
  if (!block_partials<V>(sg, sgx, a.part, c, a.counters)) return;
  double sum_g, sum_gx;
  if (!fold<V>(a.part, c, a.counters, sum_g, sum_gx)) return;
  const int ch = blockIdx.x * blockDim.x * V + threadIdx.y * blockDim.x + threadIdx.x;
  const double n = static_cast<double>(a.rows);
  const double invstd = a.invstd[ch];
  const double dgamma = sum_gx * invstd;
  const double k1 = static_cast<double>(a.weight[ch]) * invstd;
  a.dweight[ch] = static_cast<float>(dgamma);
  a.dbias[ch] = static_cast<float>(sum_g);
  if (a.local != nullptr) {  // SyncBatchNorm: the sums over every rank give the coefficients
    a.local[ch] = sum_g;
    a.local[c + ch] = sum_gx;
    return;
  }
  a.k1[ch] = static_cast<float>(k1);
  a.kx[ch] = a.training ? static_cast<float>(-k1 * invstd * dgamma / n) : 0.f;
  a.kb[ch] = a.training ? static_cast<float>(-k1 * sum_g / n) : 0.f;
}

// SyncBatchNorm: the coefficients of dx from the two sums over every rank (local, summed in
// place by the exchange) and the forward's rows over every rank.
__global__ void bn_bwd_coefficients(BnBackwardArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  const double n = *a.count;
  const double invstd = a.invstd[ch];
  const double k1 = static_cast<double>(a.weight[ch]) * invstd;
  a.k1[ch] = static_cast<float>(k1);
  a.kx[ch] = static_cast<float>(-k1 * invstd * invstd * a.local[a.c + ch] / n);
  a.kb[ch] = static_cast<float>(-k1 * a.local[ch] / n);
}

template <typename T, int V, int M, bool Two>
__global__ void __launch_bounds__(kApplyThreads)
    bn_bwd_dx(BnBackwardArgs a, const T* __restrict__ g_in, const T* __restrict__ g2,
              const T* __restrict__ y, const T* __restrict__ x, T* __restrict__ dx,
              const float* __restrict__ mean, const float* __restrict__ k1,
              const float* __restrict__ kx, const float* __restrict__ kb, int64_t rows, int c) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  float m[V], a1[V], ax[V], ab[V];
  MaskReader<T, V, M> mask;
  mask.init(a, col);
  load<float, V>(mean + col, m);
  load<float, V>(k1 + col, a1);
  load<float, V>(kx + col, ax);
  load<float, V>(kb + col, ab);
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += step) {
    const int64_t at = r * c + col;
    float g[V], xv[V];
    load<T, V>(g_in + at, g);
    if (Two) {
      float h[V];
      load<T, V>(g2 + at, h);
#pragma unroll
      for (int i = 0; i < V; ++i) g[i] += h[i];
    }
    load<T, V>(x + at, xv);
    mask.apply(a, y, r, at, col, xv, g);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = fmaf(a1[i], g[i], fmaf(ax[i], xv[i] - m[i], ab[i]));
    store<T, V>(dx + at, g);
  }
}

}  // namespace
}  // namespace dtrain::cuda
