// BatchNorm over channels-last activations with the shortcut add and ReLU, in one reduction and
// one pointwise pass each way (Note [fused BatchNorm] in cuda/fused_batch_norm.h). x is rows of
// C channels (rows = N·H·W). Each thread owns V adjacent channels of a column tile (16-byte loads
// when C is a multiple of V and the tensors are aligned, else V = 1) and walks rows:
//   bn_stats        sums of (x - x[0]) and its square per channel  -> block partials; the last
//                   block: mean, 1/std, scale, shift, running statistics, num_batches_tracked
//   bn_apply        y = relu(x * scale + shift + r)
//   bn_bwd_reduce   g = dy (0 where y = 0 under ReLU; written out as the shortcut's gradient),
//                   sums of g and g * (x - mean) -> partials; the last block: dweight, dbias and
//                   k1, kx, kb of dx = k1 g + kx (x - mean) + kb
//   bn_bwd_dx       dx
// Partials are summed in a fixed order (within a block by row, across blocks in double by block
// index): the same inputs give the same bits. The last block of a column tile is found with a
// ticket counter that it resets to 0 for the next launch, so a captured graph replays correctly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/batch_norm_args.h"
#include "cuda/element_types.cuh"

namespace dtrain::cuda {
namespace {

constexpr int kReduceThreads = 512;
constexpr int kApplyThreads = 256;
constexpr int kMaxTileX = 8;    // threads across a column tile: 64 bf16 channels at most
constexpr int kMaxVec = 8;      // 16 bytes of fp16/bf16
constexpr int kUnroll = 4;      // rows loaded before any is summed

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void load(const T* p, float (&f)[V]) {
  const Pack<T, V> k = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) f[i] = to_float(k.v[i]);
}

// A pack loaded now and converted when used: loads in flight hold V/2 (fp16, bf16) registers.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> fetch(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <typename T, int V>
__device__ __forceinline__ float value(const Pack<T, V>& k, int i) {
  return to_float(k.v[i]);
}

template <typename T, int V>
__device__ __forceinline__ void store(T* p, const float (&f)[V]) {
  Pack<T, V> k;
#pragma unroll
  for (int i = 0; i < V; ++i) k.v[i] = from_float<T>(f[i]);
  *reinterpret_cast<Pack<T, V>*>(p) = k;
}

// ReLU as torch.relu: NaN stays NaN.
__device__ __forceinline__ float relu(float v) { return v <= 0.f ? 0.f : v; }

// The block's per-channel sums of two quantities (a, b: V values of each thread) over its rows,
// written to part[(blockIdx.y * 2 + q) * c + channel]; then whether this block is the column
// tile's last to finish (every other block's partials visible to it).
template <int V>
__device__ bool block_partials(const float (&a)[V], const float (&b)[V], float* part, int c,
                               unsigned* counters) {
  __shared__ float red[2 * kReduceThreads * kMaxVec];
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
    for (int r = 0; r < static_cast<int>(blockDim.y); ++r) s += red[(q * blockDim.y + r) * tile + j];
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
  __shared__ double sums[kReduceThreads];
  const int tile = blockDim.x * V, col0 = blockIdx.x * tile;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  const int entries = 2 * tile;                 // <= 2 * kMaxTileX * kMaxVec = 128 <= nthreads
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
  double var = sq / n - dm * dm;  // biased, of the shifted values: the same variance
  if (var < 0) var = 0;
  const float mean = static_cast<float>(static_cast<double>(to_float(x[ch])) + dm);
  const float invstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(a.eps)));
  const float scale = a.weight[ch] * invstd;
  a.mean[ch] = mean;
  a.invstd[ch] = invstd;
  a.scale[ch] = scale;
  a.shift[ch] = a.bias[ch] - mean * scale;
  const float m = a.momentum;
  a.running_mean[ch] = (1.f - m) * a.running_mean[ch] + m * mean;
  const float unbiased = static_cast<float>(var * n / (n - 1));
  a.running_var[ch] = (1.f - m) * a.running_var[ch] + m * unbiased;
  if (ch == 0) *a.batches += 1;
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

template <typename T, int V, bool Residual, bool Relu>
__global__ void __launch_bounds__(kApplyThreads)
    bn_apply(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ y,
             const float* __restrict__ scale, const float* __restrict__ shift, int64_t rows, int c) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  float sc[V], sh[V];
  load<float, V>(scale + col, sc);
  load<float, V>(shift + col, sh);
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
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
  }
}

template <typename T, int V, bool Mask, bool WriteG>
__global__ void __launch_bounds__(kReduceThreads, 2)
    bn_bwd_reduce(const T* __restrict__ dy, const T* __restrict__ y, const T* __restrict__ x,
                  T* __restrict__ g_out, BnBackwardArgs a) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  const int c = a.c;
  float mean[V], sg[V], sgx[V];
#pragma unroll
  for (int i = 0; i < V; ++i) mean[i] = sg[i] = sgx[i] = 0.f;
  if (col < c) {
    load<float, V>(a.mean + col, mean);
    const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    // One row an iteration: its two or three loads are in flight together, and 1,024 threads
    // a multiprocessor keep enough bytes in flight.
    for (; r < a.rows; r += step) {
      const int64_t at = r * c + col;
      const Pack<T, V> pg = fetch<T, V>(dy + at);
      Pack<T, V> py;
      if (Mask) py = fetch<T, V>(y + at);
      const Pack<T, V> px = fetch<T, V>(x + at);
      float g[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        g[i] = value(pg, i);
        if (Mask && !(value(py, i) > 0.f)) g[i] = 0.f;
      }
      if (WriteG) store<T, V>(g_out + at, g);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        sg[i] += g[i];
        sgx[i] = fmaf(g[i], value(px, i) - mean[i], sgx[i]);
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
  a.k1[ch] = static_cast<float>(k1);
  a.kx[ch] = a.training ? static_cast<float>(-k1 * invstd * dgamma / n) : 0.f;
  a.kb[ch] = a.training ? static_cast<float>(-k1 * sum_g / n) : 0.f;
}

template <typename T, int V, bool Mask>
__global__ void __launch_bounds__(kApplyThreads)
    bn_bwd_dx(const T* __restrict__ g_in, const T* __restrict__ y, const T* __restrict__ x,
              T* __restrict__ dx, const float* __restrict__ mean, const float* __restrict__ k1,
              const float* __restrict__ kx, const float* __restrict__ kb, int64_t rows, int c) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  float m[V], a1[V], ax[V], ab[V];
  load<float, V>(mean + col, m);
  load<float, V>(k1 + col, a1);
  load<float, V>(kx + col, ax);
  load<float, V>(kb + col, ab);
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
    const int64_t at = r * c + col;
    float g[V], xv[V];
    load<T, V>(g_in + at, g);
    if (Mask) {
      float yv[V];
      load<T, V>(y + at, yv);
#pragma unroll
      for (int i = 0; i < V; ++i) g[i] = yv[i] > 0.f ? g[i] : 0.f;
    }
    load<T, V>(x + at, xv);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = fmaf(a1[i], g[i], fmaf(ax[i], xv[i] - m[i], ab[i]));
    store<T, V>(dx + at, g);
  }
}

// ---- launch shapes -----------------------------------------------------------------------------

struct Shape {
  dim3 block, grid;
};

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Threads across a column tile: the vectors of C, rounded up to a power of two, at most 8.
int tile_x(int c, int v) {
  const int vectors = ceil_div(c, v);
  int bx = 1;
  while (bx < vectors && bx < kMaxTileX) bx *= 2;
  return bx;
}

// The reductions: about two blocks per multiprocessor in all, each row loop at least kUnroll deep.
Shape reduce_shape(int64_t rows, int c, int v, int sms) {
  const int bx = tile_x(c, v), by = kReduceThreads / bx;
  const int gx = ceil_div(ceil_div(c, v), bx);
  int gy = ceil_div(rows, static_cast<int64_t>(by) * kUnroll);
  const int most = (2 * sms) / gx > 1 ? (2 * sms) / gx : 1;
  if (gy > most) gy = most;
  if (gy < 1) gy = 1;
  return {dim3(bx, by), dim3(gx, gy)};
}

// The pointwise passes: about four rows a thread, at most 65535 blocks down.
Shape apply_shape(int64_t rows, int c, int v) {
  const int bx = tile_x(c, v), by = kApplyThreads / bx;
  const int gx = ceil_div(ceil_div(c, v), bx);
  int gy = ceil_div(rows, static_cast<int64_t>(by) * 4);
  if (gy > 65535) gy = 65535;
  if (gy < 1) gy = 1;
  return {dim3(bx, by), dim3(gx, gy)};
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename F>
cudaError_t with_dtype(int dtype, F&& f) {
  switch (dtype) {
    case 0: return f(float{});
    case 1: return f(__half{});
    default: return f(__nv_bfloat16{});
  }
}

template <bool B, typename F>
cudaError_t with_bool_impl(F&& f) { return f(std::integral_constant<bool, B>{}); }
template <typename F>
cudaError_t with_bool(bool b, F&& f) {
  return b ? with_bool_impl<true>(f) : with_bool_impl<false>(f);
}

template <typename T>
struct Forward {
  template <int V>
  static cudaError_t run(const BnForwardArgs& a, cudaStream_t stream) {
    const T* x = static_cast<const T*>(a.x);
    if (a.training) {
      const Shape s = reduce_shape(a.rows, a.c, V, a.sms);
      bn_stats<T, V><<<s.grid, s.block, 0, stream>>>(x, a);
    } else {
      bn_eval_coefficients<<<ceil_div(a.c, 256), 256, 0, stream>>>(a);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const Shape s = apply_shape(a.rows, a.c, V);
    return with_bool(a.residual != nullptr, [&](auto res) {
      return with_bool(a.relu, [&](auto rl) {
        bn_apply<T, V, decltype(res)::value, decltype(rl)::value><<<s.grid, s.block, 0, stream>>>(
            x, static_cast<const T*>(a.residual), static_cast<T*>(a.y), a.scale, a.shift, a.rows, a.c);
        return cudaGetLastError();
      });
    });
  }
};

template <typename T>
struct Backward {
  template <int V>
  static cudaError_t run(const BnBackwardArgs& a, cudaStream_t stream) {
    const T* dy = static_cast<const T*>(a.dy);
    const T* y = static_cast<const T*>(a.y);
    const T* x = static_cast<const T*>(a.x);
    T* g = static_cast<T*>(a.g);
    const Shape rs = reduce_shape(a.rows, a.c, V, a.sms);
    cudaError_t e = with_bool(a.relu, [&](auto mask) {
      return with_bool(g != nullptr, [&](auto write) {
        bn_bwd_reduce<T, V, decltype(mask)::value, decltype(write)::value>
            <<<rs.grid, rs.block, 0, stream>>>(dy, y, x, g, a);
        return cudaGetLastError();
      });
    });
    if (e != cudaSuccess) return e;
    // With the shortcut's gradient written, dx starts from it (already masked).
    const T* g_in = g != nullptr ? g : dy;
    const Shape s = apply_shape(a.rows, a.c, V);
    return with_bool(a.relu && g == nullptr, [&](auto mask) {
      bn_bwd_dx<T, V, decltype(mask)::value><<<s.grid, s.block, 0, stream>>>(
          g_in, y, x, static_cast<T*>(a.dx), a.mean, a.k1, a.kx, a.kb, a.rows, a.c);
      return cudaGetLastError();
    });
  }
};

// V = 16 bytes of T when C allows it and every activation pointer is 16-byte aligned, else 1.
template <template <typename> class Pass, typename Args>
cudaError_t dispatch(const Args& a, bool aligned, cudaStream_t stream) {
  return with_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = 16 / static_cast<int>(sizeof(T));
    if (aligned && a.c % kV == 0) return Pass<T>::template run<kV>(a, stream);
    return Pass<T>::template run<1>(a, stream);
  });
}

}  // namespace

int batch_norm_partial_rows(int sms) { return 2 * sms; }

cudaError_t batch_norm_forward(const BnForwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const bool aligned = aligned16(a.x) && aligned16(a.y) && (!a.residual || aligned16(a.residual));
  return dispatch<Forward>(a, aligned, stream);
}

cudaError_t batch_norm_backward(const BnBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const bool aligned = aligned16(a.dy) && aligned16(a.x) && aligned16(a.dx) &&
                       (!a.relu || aligned16(a.y)) && (!a.g || aligned16(a.g));
  return dispatch<Backward>(a, aligned, stream);
}

}  // namespace dtrain::cuda
