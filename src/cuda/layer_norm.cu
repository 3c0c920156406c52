// Residual add + LayerNorm over the last dimension (C) of fp32 rows, in two kernels and a small
// reduction (Note [fused residual LayerNorm] in cuda/fused_norm.h):
//   forward:  s = x + r (r optional, any of fp32/fp16/bf16);  mean, rstd = moments of s (biased
//             variance, as LibTorch);  y = (s - mean) * rstd * w + b, stored in Y (fp32/fp16/bf16)
//   backward: xhat = (s - mean) * rstd;  g = dy * w;
//             ds = rstd * (g - mean(g) - xhat * mean(g * xhat)) + ds_in   (ds_in: the gradient
//             reaching s from later uses, optional);  dx = ds (fp32), dr = ds in R;
//             dw = sum over rows of dy * xhat, db = sum of dy
// One warp per row, fp32 arithmetic throughout. The weight and bias gradients are summed per
// warp in shared memory, then over the block's warps, then over blocks (sum_partials), each in a
// fixed order: the result is deterministic (no atomics).
// Rows of 128·V floats (V = 2, 3, 4, 6, 8: C = 256 ... 1024, GPT's widths) with 16-byte aligned
// tensors take a second pair of kernels that keep the row in registers (each lane V float4s):
// every element is read from memory once, in 16-byte loads; the arithmetic and its order per
// element are the same.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/column_sum.h"
#include "cuda/element_types.cuh"

namespace dtrain::cuda {

int ln_backward_warps(int c);
int ln_backward_blocks(int64_t rows, int c);

namespace {

constexpr int kWarp = 32;
constexpr int kForwardWarps = 8;
constexpr int kMaxBackwardBlocks = 512;
constexpr int kSharedBytes = 48 * 1024;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's sum over its warps' (dw, db) rows in shared memory, in warp order, into
// part[block] = (dw (c), db (c)). After a __syncthreads().
__device__ __forceinline__ void block_partials(const float* shared, int warps, int c, float* part) {
  float* out = part + static_cast<size_t>(blockIdx.x) * 2 * c;
  for (int i = threadIdx.x; i < 2 * c; i += blockDim.x) {
    float v = 0.f;
    for (int k = 0; k < warps; ++k) v += shared[static_cast<size_t>(k) * 2 * c + i];
    out[i] = v;
  }
}

template <typename R, typename Y>
__global__ void __launch_bounds__(kForwardWarps* kWarp)
    ln_forward(const float* __restrict__ x, const R* __restrict__ r, float* __restrict__ s_out,
               Y* __restrict__ y, const float* __restrict__ w, const float* __restrict__ b,
               float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows, int c,
               float eps) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kForwardWarps + threadIdx.x / kWarp;
  if (row >= rows) return;
  const float* xr = x + row * c;
  // With a residual, s is written to s_out; without, s is x itself.
  const float* sr = r ? s_out + row * c : xr;
  float sum = 0.f;
  if (r) {
    const R* rr = r + row * c;
    float* so = s_out + row * c;
    for (int i = lane; i < c; i += kWarp) {
      const float v = xr[i] + to_float(rr[i]);
      so[i] = v;
      sum += v;
    }
  } else {
    for (int i = lane; i < c; i += kWarp) sum += xr[i];
  }
  const float mean = warp_sum(sum) / c;
  float sq = 0.f;
  for (int i = lane; i < c; i += kWarp) {  // reads back this lane's own elements
    const float d = sr[i] - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(warp_sum(sq) / c + eps);
  Y* yr = y + row * c;
  for (int i = lane; i < c; i += kWarp) yr[i] = from_float<Y>((sr[i] - mean) * rstd * w[i] + b[i]);
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Shared memory: `warps` rows of (dw, db) partial sums, 2 * c floats each.
template <typename R, typename Y>
__global__ void ln_backward(const Y* __restrict__ dy, const float* __restrict__ ds_in,
                            const float* __restrict__ s, const float* __restrict__ w,
                            const float* __restrict__ mean, const float* __restrict__ rstd,
                            float* __restrict__ dx, R* __restrict__ dr, float* __restrict__ part,
                            int64_t rows, int c) {
  extern __shared__ float shared[];
  const int warps = blockDim.x / kWarp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* dw_acc = shared + static_cast<size_t>(warp) * 2 * c;
  float* db_acc = dw_acc + c;
  for (int i = lane; i < c; i += kWarp) dw_acc[i] = db_acc[i] = 0.f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < rows; row += stride) {
    const Y* dyr = dy + row * c;
    const float* sr = s + row * c;
    const float m = mean[row], rs = rstd[row];
    float g_sum = 0.f, gx_sum = 0.f;
    for (int i = lane; i < c; i += kWarp) {
      const float g = to_float(dyr[i]) * w[i];
      g_sum += g;
      gx_sum += g * (sr[i] - m) * rs;
    }
    const float g_mean = warp_sum(g_sum) / c, gx_mean = warp_sum(gx_sum) / c;
    float* dxr = dx + row * c;
    for (int i = lane; i < c; i += kWarp) {
      const float d = to_float(dyr[i]);
      const float xhat = (sr[i] - m) * rs;
      float v = rs * (d * w[i] - g_mean - xhat * gx_mean);
      if (ds_in) v += ds_in[row * c + i];
      dxr[i] = v;
      if (dr) dr[row * c + i] = from_float<R>(v);
      dw_acc[i] += d * xhat;  // this lane's own columns: no race
      db_acc[i] += d;
    }
  }
  __syncthreads();
  block_partials(shared, warps, c, part);
}

// 4 consecutive elements of T as floats, and back (16 bytes of fp32, 8 of fp16/bf16).
template <typename T>
struct Vec4;
template <>
struct Vec4<float> {
  __device__ __forceinline__ static float4 load(const float* p) {
    return *reinterpret_cast<const float4*>(p);
  }
  __device__ __forceinline__ static void store(float* p, float4 v) {
    *reinterpret_cast<float4*>(p) = v;
  }
};
template <typename H>
struct Vec4Half {
  __device__ __forceinline__ static float4 load(const H* p) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const H* h = reinterpret_cast<const H*>(&raw);
    return make_float4(to_float(h[0]), to_float(h[1]), to_float(h[2]), to_float(h[3]));
  }
  __device__ __forceinline__ static void store(H* p, float4 v) {
    uint2 raw;
    H* h = reinterpret_cast<H*>(&raw);
    h[0] = from_float<H>(v.x), h[1] = from_float<H>(v.y), h[2] = from_float<H>(v.z),
    h[3] = from_float<H>(v.w);
    *reinterpret_cast<uint2*>(p) = raw;
  }
};
template <>
struct Vec4<__half> : Vec4Half<__half> {};
template <>
struct Vec4<__nv_bfloat16> : Vec4Half<__nv_bfloat16> {};

__device__ __forceinline__ float& at4(float4& v, int j) { return (&v.x)[j]; }
__device__ __forceinline__ float at4(const float4& v, int j) { return (&v.x)[j]; }

// Lane `lane` holds the row's float4s lane, lane + 32, ..., lane + 32·(V-1).
template <typename R, typename Y, int V>
__global__ void __launch_bounds__(kForwardWarps* kWarp)
    ln_forward_reg(const float* __restrict__ x, const R* __restrict__ r, float* __restrict__ s_out,
                   Y* __restrict__ y, const float* __restrict__ w, const float* __restrict__ b,
                   float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows,
                   float eps) {
  constexpr int c = 128 * V;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kForwardWarps + threadIdx.x / kWarp;
  if (row >= rows) return;
  float4 v[V];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t at = row * c + 4 * (lane + kWarp * k);
    v[k] = Vec4<float>::load(x + at);
    if (r) {
      const float4 rv = Vec4<R>::load(r + at);
      v[k].x += rv.x, v[k].y += rv.y, v[k].z += rv.z, v[k].w += rv.w;
      Vec4<float>::store(s_out + at, v[k]);
    }
    sum += v[k].x + v[k].y + v[k].z + v[k].w;
  }
  const float mean = warp_sum(sum) / c;
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < V; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = at4(v[k], j) - mean;
      sq += d * d;
    }
  const float rstd = rsqrtf(warp_sum(sq) / c + eps);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int col = 4 * (lane + kWarp * k);
    const float4 wv = Vec4<float>::load(w + col), bv = Vec4<float>::load(b + col);
    float4 o;
#pragma unroll
    for (int j = 0; j < 4; ++j) at4(o, j) = (at4(v[k], j) - mean) * rstd * at4(wv, j) + at4(bv, j);
    Vec4<Y>::store(y + row * c + col, o);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// As ln_backward, with the row's dy and xhat in registers (2·V float4s a lane). The weight is
// read through the L1 cache and dw, db are summed in shared memory as there, so that 2 blocks of
// 8 warps share an SM (at 150 registers, with w, dw and db in registers too, one block fit and
// the step was 1.1% slower than with the generic kernel; capped at 80 registers for 3 blocks, it
// spilled and gained nothing; measured on GPT-2, docs/PERFORMANCE.md).
template <typename R, typename Y, int V>
__global__ void __launch_bounds__(8 * kWarp, 2)
    ln_backward_reg(const Y* __restrict__ dy, const float* __restrict__ ds_in,
                    const float* __restrict__ s, const float* __restrict__ w,
                    const float* __restrict__ mean, const float* __restrict__ rstd,
                    float* __restrict__ dx, R* __restrict__ dr, float* __restrict__ part,
                    int64_t rows) {
  constexpr int c = 128 * V;
  extern __shared__ float shared[];
  const int warps = blockDim.x / kWarp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* dw_acc = shared + static_cast<size_t>(warp) * 2 * c;
  float* db_acc = dw_acc + c;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int col = 4 * (lane + kWarp * k);
    Vec4<float>::store(dw_acc + col, make_float4(0.f, 0.f, 0.f, 0.f));
    Vec4<float>::store(db_acc + col, make_float4(0.f, 0.f, 0.f, 0.f));
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < rows; row += stride) {
    const float m = mean[row], rs = rstd[row];
    float4 d[V], xh[V];
    float g_sum = 0.f, gx_sum = 0.f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int64_t at = row * c + 4 * (lane + kWarp * k);
      d[k] = Vec4<Y>::load(dy + at);
      xh[k] = Vec4<float>::load(s + at);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float4 wv = __ldg(reinterpret_cast<const float4*>(w) + lane + kWarp * k);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        at4(xh[k], j) = (at4(xh[k], j) - m) * rs;
        const float g = at4(d[k], j) * at4(wv, j);
        g_sum += g;
        gx_sum += g * at4(xh[k], j);
      }
    }
    const float g_mean = warp_sum(g_sum) / c, gx_mean = warp_sum(gx_sum) / c;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int col = 4 * (lane + kWarp * k);
      const int64_t at = row * c + col;
      const float4 wv = __ldg(reinterpret_cast<const float4*>(w) + lane + kWarp * k);
      const float4 in = ds_in ? Vec4<float>::load(ds_in + at) : make_float4(0.f, 0.f, 0.f, 0.f);
      float4 o, dwv = Vec4<float>::load(dw_acc + col), dbv = Vec4<float>::load(db_acc + col);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float v = rs * (at4(d[k], j) * at4(wv, j) - g_mean - at4(xh[k], j) * gx_mean);
        if (ds_in) v += at4(in, j);
        at4(o, j) = v;
        at4(dwv, j) += at4(d[k], j) * at4(xh[k], j);  // this lane's own columns: no race
        at4(dbv, j) += at4(d[k], j);
      }
      Vec4<float>::store(dw_acc + col, dwv);
      Vec4<float>::store(db_acc + col, dbv);
      Vec4<float>::store(dx + at, o);
      if (dr) Vec4<R>::store(dr + at, o);
    }
  }
  __syncthreads();
  block_partials(shared, warps, c, part);
}

// The register kernels' V for a row width, or 0 when the generic kernels run it.
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
int reg_vec(int c) {
  switch (c) {
    case 256:
      return 2;
    case 384:
      return 3;
    case 512:
      return 4;
    case 768:
      return 6;
    case 1024:
      return 8;
  }
  return 0;
}

template <typename F>
cudaError_t with_vec(int v, F&& f) {
  switch (v) {
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
  }
  return cudaErrorInvalidValue;
}

// dtype codes: 0 fp32, 1 fp16, 2 bf16.
template <template <typename, typename> class F, typename... Args>
cudaError_t dispatch(int r_dtype, int y_dtype, Args&&... args) {
  auto with_y = [&](auto r_tag) -> cudaError_t {
    using R = decltype(r_tag);
    switch (y_dtype) {
      case 0:
        return F<R, float>::run(args...);
      case 1:
        return F<R, __half>::run(args...);
      case 2:
        return F<R, __nv_bfloat16>::run(args...);
    }
    return cudaErrorInvalidValue;
  };
  switch (r_dtype) {
    case 0:
      return with_y(float{});
    case 1:
      return with_y(__half{});
    case 2:
      return with_y(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

template <typename R, typename Y>
struct Forward {
  static cudaError_t run(const float* x, const void* r, float* s, void* y, const float* w,
                         const float* b, float* mean, float* rstd, int64_t rows, int c, float eps,
                         cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    const auto blocks = static_cast<unsigned>((rows + kForwardWarps - 1) / kForwardWarps);
    const int v = reg_vec(c);
    if (v && aligned16(x) && aligned16(r) && aligned16(s) && aligned16(y) && aligned16(w) &&
        aligned16(b)) {
      return with_vec(v, [&](auto vc) {
        ln_forward_reg<R, Y, decltype(vc)::value><<<blocks, kForwardWarps * kWarp, 0, stream>>>(
            x, static_cast<const R*>(r), s, static_cast<Y*>(y), w, b, mean, rstd, rows, eps);
        return cudaGetLastError();
      });
    }
    ln_forward<R, Y><<<blocks, kForwardWarps * kWarp, 0, stream>>>(
        x, static_cast<const R*>(r), s, static_cast<Y*>(y), w, b, mean, rstd, rows, c, eps);
    return cudaGetLastError();
  }
};

template <typename R, typename Y>
struct Backward {
  static cudaError_t run(const void* dy, const float* ds_in, const float* s, const float* w,
                         const float* mean, const float* rstd, float* dx, void* dr, float* part,
                         float* dw, float* db, int64_t rows, int c, cudaStream_t stream) {
    const int warps = ln_backward_warps(c);
    const int blocks = ln_backward_blocks(rows, c);
    if (rows > 0) {
      const size_t shared = static_cast<size_t>(warps) * 2 * c * sizeof(float);
      const int v = reg_vec(c);
      cudaError_t e;
      if (v && aligned16(dy) && aligned16(ds_in) && aligned16(s) && aligned16(w) && aligned16(dx) &&
          aligned16(dr)) {
        e = with_vec(v, [&](auto vc) {
          ln_backward_reg<R, Y, decltype(vc)::value><<<blocks, warps * kWarp, shared, stream>>>(
              static_cast<const Y*>(dy), ds_in, s, w, mean, rstd, dx, static_cast<R*>(dr), part,
              rows);
          return cudaGetLastError();
        });
      } else {
        ln_backward<R, Y><<<blocks, warps * kWarp, shared, stream>>>(
            static_cast<const Y*>(dy), ds_in, s, w, mean, rstd, dx, static_cast<R*>(dr), part, rows,
            c);
        e = cudaGetLastError();
      }
      if (e != cudaSuccess) return e;
    }
    return sum_partials(part, rows > 0 ? blocks : 0, 2 * static_cast<int64_t>(c), c, dw, db,
                        stream);
  }
};

}  // namespace

// Warps per backward block: as many as fit their (dw, db) partials in 48 KiB, at most 8.
int ln_backward_warps(int c) {
  const int fit = kSharedBytes / (2 * c * static_cast<int>(sizeof(float)));
  return fit < 1 ? 0 : fit > 8 ? 8 : fit;
}

int ln_backward_blocks(int64_t rows, int c) {
  const int warps = ln_backward_warps(c);
  if (warps == 0) return 0;
  const int64_t need = (rows + warps - 1) / warps;
  return static_cast<int>(need < 1 ? 1 : need > kMaxBackwardBlocks ? kMaxBackwardBlocks : need);
}

cudaError_t layer_norm_forward(int r_dtype, int y_dtype, const float* x, const void* r, float* s,
                               void* y, const float* w, const float* b, float* mean, float* rstd,
                               int64_t rows, int c, float eps, cudaStream_t stream) {
  return dispatch<Forward>(r_dtype, y_dtype, x, r, s, y, w, b, mean, rstd, rows, c, eps, stream);
}

cudaError_t layer_norm_backward(int r_dtype, int y_dtype, const void* dy, const float* ds_in,
                                const float* s, const float* w, const float* mean,
                                const float* rstd, float* dx, void* dr, float* part, float* dw,
                                float* db, int64_t rows, int c, cudaStream_t stream) {
  return dispatch<Backward>(r_dtype, y_dtype, dy, ds_in, s, w, mean, rstd, dx, dr, part, dw, db,
                            rows, c, stream);
}

}  // namespace dtrain::cuda
