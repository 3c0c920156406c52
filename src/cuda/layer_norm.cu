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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

template <typename R, typename Y>
__global__ void __launch_bounds__(kForwardWarps * kWarp)
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
  // The block's sum over its warps, in warp order, into part[block] = (dw (c), db (c)).
  float* out = part + static_cast<size_t>(blockIdx.x) * 2 * c;
  for (int i = threadIdx.x; i < 2 * c; i += blockDim.x) {
    float v = 0.f;
    for (int k = 0; k < warps; ++k) v += shared[static_cast<size_t>(k) * 2 * c + i];
    out[i] = v;
  }
}

// dtype codes: 0 fp32, 1 fp16, 2 bf16.
template <template <typename, typename> class F, typename... Args>
cudaError_t dispatch(int r_dtype, int y_dtype, Args&&... args) {
  auto with_y = [&](auto r_tag) -> cudaError_t {
    using R = decltype(r_tag);
    switch (y_dtype) {
      case 0: return F<R, float>::run(args...);
      case 1: return F<R, __half>::run(args...);
      case 2: return F<R, __nv_bfloat16>::run(args...);
    }
    return cudaErrorInvalidValue;
  };
  switch (r_dtype) {
    case 0: return with_y(float{});
    case 1: return with_y(__half{});
    case 2: return with_y(__nv_bfloat16{});
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
      ln_backward<R, Y><<<blocks, warps * kWarp, static_cast<size_t>(warps) * 2 * c * sizeof(float),
                          stream>>>(static_cast<const Y*>(dy), ds_in, s, w, mean, rstd, dx,
                                    static_cast<R*>(dr), part, rows, c);
      const cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) return e;
    }
    return sum_partials(part, rows > 0 ? blocks : 0, 2 * static_cast<int64_t>(c), c, dw, db, stream);
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
