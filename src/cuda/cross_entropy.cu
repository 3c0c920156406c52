// Cross-entropy over rows of logits for large vocabularies, in two kernels that read the logits
// in their own precision (fp32, fp16 or bf16) and compute in fp32; with label smoothing e
// (PyTorch's cross_entropy(label_smoothing=e): the target one-hot times 1 - e plus e / V):
//   forward:  lse[r] = logsumexp(x[r, :]);
//             loss[r] = lse[r] - (1 - e) x[r, t[r]] - e sum_i x[r, i] / V
//   backward: dx[r, i] = (exp(x[r, i] - lse[r]) - (1 - e) [i == t[r]] - e / V) * scale * g
// (e = 0: the sum is not read, and the formulas are the plain ones).
// where g is the incoming gradient of the reduced loss, read from device memory (no host sync,
// so a training step that uses it can be captured in a CUDA graph). One block per row; the
// forward is one pass (online max/sum), the backward writes each gradient element once, possibly
// over the logits themselves (each thread reads an element before it writes it).
// A third kernel does both for one chunk of a model's head (Note [fused head and loss]):
//   loss[r] = lse[r] - x[r, t[r]];  x[r, i] <- (exp(x[r, i] - lse[r]) - [i == t[r]]) * scale
// reading each row twice (the second time mostly from L2) and writing it once, in place.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "cuda/element_types.cuh"

namespace dtrain::cuda {
namespace {

constexpr int kThreads = 512;

// Running (max, sum of exp(x - max)) pairs merged.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (m2 == -FLT_MAX) return;
  if (m == -FLT_MAX) {
    m = m2;
    s = s2;
    return;
  }
  const float mx = fmaxf(m, m2);
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// (max, sum of exp(x - max)) of the block's threads merged; every thread gets log-sum-exp.
template <int kBlock>
__device__ __forceinline__ float block_lse(float m, float s) {
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    merge(m, s, m2, s2);
  }
  __shared__ float sm[kBlock / 32], ss[kBlock / 32];
  __shared__ float result;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sm[warp] = m, ss[warp] = s;
  __syncthreads();
  if (warp == 0) {
    m = lane < kBlock / 32 ? sm[lane] : -FLT_MAX;
    s = lane < kBlock / 32 ? ss[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
      merge(m, s, m2, s2);
    }
    if (lane == 0) result = m + logf(s);
  }
  __syncthreads();
  return result;
}

// log-sum-exp of one row of `vocab` elements, by a block of kBlock threads (every thread gets it).
// 16-byte rows: each thread takes the max of its eight (or four) elements first and rescales its
// running sum at most once per load; two loads in flight per thread.
template <int kBlock, typename T>
__device__ __forceinline__ float row_lse(const T* __restrict__ xr, int64_t vocab) {
  float m = -FLT_MAX, s = 0.f;
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte load
  if (vocab % kVec == 0 && reinterpret_cast<uintptr_t>(xr) % 16 == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    const int64_t n = vocab / kVec;
    auto add = [&](const uint4& raw) {
      const T* e = reinterpret_cast<const T*>(&raw);
      float v[kVec], lm = -FLT_MAX;
#pragma unroll
      for (int k = 0; k < kVec; ++k) lm = fmaxf(lm, v[k] = to_float(e[k]));
      if (lm > m) {
        s *= __expf(m - lm);
        m = lm;
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += __expf(v[k] - m);
    };
    int64_t i = threadIdx.x;
    for (; i + kBlock < n; i += 2 * kBlock) {
      const uint4 a = xv[i], b = xv[i + kBlock];
      add(a);
      add(b);
    }
    if (i < n) add(xv[i]);
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kBlock) {
      const float v = to_float(xr[i]);
      if (v > m) {
        s = (m == -FLT_MAX ? 0.f : s * __expf(m - v)) + 1.f;
        m = v;
      } else {
        s += __expf(v - m);
      }
    }
  }
  return block_lse<kBlock>(m, s);
}

// The sum of one row, by a block of kBlock threads (every thread gets it).
template <int kBlock, typename T>
__device__ __forceinline__ float row_sum(const T* __restrict__ xr, int64_t vocab) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < vocab; i += kBlock) s += to_float(xr[i]);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  __shared__ float partial[kBlock / 32];
  __shared__ float result;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < kBlock / 32 ? partial[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) result = s;
  }
  __syncthreads();
  return result;
}

// A class id outside [0, vocab) makes the loss NaN (visible) instead of reading elsewhere. `xt`:
// the target's logit; `sum`: the row's sum (read only when smoothing > 0).
__device__ __forceinline__ float row_loss(float lse, float xt, float sum, int64_t t, int64_t vocab,
                                          float smoothing) {
  if (t < 0 || t >= vocab) return __int_as_float(0x7fc00000);
  if (smoothing == 0.f) return lse - xt;
  return lse - (1.f - smoothing) * xt - smoothing * sum / static_cast<float>(vocab);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_forward(const T* __restrict__ x, const int64_t* __restrict__ targets, int64_t vocab,
               float smoothing, float* __restrict__ loss, float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * vocab;
  const float l = row_lse<kThreads>(xr, vocab);
  const float sum = smoothing > 0.f ? row_sum<kThreads>(xr, vocab) : 0.f;
  if (threadIdx.x == 0) {
    const int64_t t = targets[row];
    lse[row] = l;
    loss[row] = row_loss(l, t >= 0 && t < vocab ? to_float(xr[t]) : 0.f, sum, t, vocab, smoothing);
  }
}

// dr[i] = (exp(xr[i] - lse) - on [i == t] - off) * g over one row, by a block of kBlock threads
// (on = 1 - e, off = e / V for label smoothing e); dr may be
// xr (each thread reads an element before it writes it). Each element is read for the last time
// and written for the next GEMM to read from memory: both streamed past the caches.
template <int kBlock, typename T>
__device__ __forceinline__ void row_gradient(const T* xr, T* dr, int64_t vocab, float lse,
                                             int64_t t, float g, float on, float off) {
  constexpr int kVec = 16 / sizeof(T);
  if (vocab % kVec == 0 && reinterpret_cast<uintptr_t>(xr) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(dr) % 16 == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    uint4* dv = reinterpret_cast<uint4*>(dr);
    for (int64_t i = threadIdx.x; i < vocab / kVec; i += kBlock) {
      const uint4 raw = __ldcs(xv + i);
      const T* e = reinterpret_cast<const T*>(&raw);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int64_t j = i * kVec + k;
        o[k] = from_float<T>((__expf(to_float(e[k]) - lse) - (j == t ? on : 0.f) - off) * g);
      }
      __stcs(dv + i, out);
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kBlock)
      dr[i] = from_float<T>((__expf(to_float(xr[i]) - lse) - (i == t ? on : 0.f) - off) * g);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_backward(const T* x, const int64_t* __restrict__ targets, int64_t vocab,
                const float* __restrict__ lse, const float* __restrict__ grad, float scale,
                float smoothing, T* dx) {  // dx may be x (in place): not __restrict__
  const int64_t row = blockIdx.x;
  row_gradient<kThreads>(x + row * vocab, dx + row * vocab, vocab, lse[row], targets[row],
                         *grad * scale, 1.f - smoothing, smoothing / static_cast<float>(vocab));
}

// The forward and the backward of one row in one kernel, the gradient over the logits.
template <typename T, int kBlock>
__global__ void __launch_bounds__(kBlock)
    ce_loss_and_grad(T* x, const int64_t* __restrict__ targets, int64_t vocab, float scale,
                     float smoothing, float* __restrict__ loss) {
  const int64_t row = blockIdx.x;
  T* xr = x + row * vocab;
  const int64_t t = targets[row];
  // The target's logit and the row's sum are read before any thread overwrites them (row_lse and
  // row_sum synchronize the block).
  const float xt = threadIdx.x == 0 && t >= 0 && t < vocab ? to_float(xr[t]) : 0.f;
  const float l = row_lse<kBlock>(xr, vocab);
  const float sum = smoothing > 0.f ? row_sum<kBlock>(xr, vocab) : 0.f;
  if (threadIdx.x == 0) loss[row] = row_loss(l, xt, sum, t, vocab, smoothing);
  row_gradient<kBlock>(xr, xr, vocab, l, t, scale, 1.f - smoothing,
                       smoothing / static_cast<float>(vocab));
}

template <typename T>
void launch(const void* x, const int64_t* targets, int64_t rows, int64_t vocab, float smoothing,
            float* loss, float* lse, cudaStream_t stream) {
  if (rows == 0) return;
  ce_forward<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const T*>(x), targets, vocab, smoothing, loss, lse);
}

template <typename T>
void launch_backward(const void* x, const int64_t* targets, int64_t rows, int64_t vocab,
                     const float* lse, const float* grad, float scale, float smoothing, void* dx,
                     cudaStream_t stream) {
  if (rows == 0) return;
  ce_backward<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const T*>(x), targets, vocab, lse, grad, scale, smoothing, static_cast<T*>(dx));
}

}  // namespace

// dtype: 0 = fp32, 1 = fp16, 2 = bf16. Returns the launch error (cudaSuccess when launched).
cudaError_t cross_entropy_forward(int dtype, const void* x, const int64_t* targets, int64_t rows,
                                  int64_t vocab, float smoothing, float* loss, float* lse,
                                  cudaStream_t stream) {
  switch (dtype) {
    case 0:
      launch<float>(x, targets, rows, vocab, smoothing, loss, lse, stream);
      break;
    case 1:
      launch<__half>(x, targets, rows, vocab, smoothing, loss, lse, stream);
      break;
    default:
      launch<__nv_bfloat16>(x, targets, rows, vocab, smoothing, loss, lse, stream);
      break;
  }
  return cudaGetLastError();
}

cudaError_t cross_entropy_backward(int dtype, const void* x, const int64_t* targets, int64_t rows,
                                   int64_t vocab, const float* lse, const float* grad, float scale,
                                   float smoothing, void* dx, cudaStream_t stream) {
  switch (dtype) {
    case 0:
      launch_backward<float>(x, targets, rows, vocab, lse, grad, scale, smoothing, dx, stream);
      break;
    case 1:
      launch_backward<__half>(x, targets, rows, vocab, lse, grad, scale, smoothing, dx, stream);
      break;
    default:
      launch_backward<__nv_bfloat16>(x, targets, rows, vocab, lse, grad, scale, smoothing, dx,
                                     stream);
      break;
  }
  return cudaGetLastError();
}

template <int kBlock>
void launch_loss_and_grad(int dtype, void* x, const int64_t* targets, int64_t rows, int64_t vocab,
                          float scale, float smoothing, float* loss, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows);
  switch (dtype) {
    case 0:
      ce_loss_and_grad<float, kBlock><<<grid, kBlock, 0, stream>>>(static_cast<float*>(x), targets,
                                                                   vocab, scale, smoothing, loss);
      break;
    case 1:
      ce_loss_and_grad<__half, kBlock><<<grid, kBlock, 0, stream>>>(
          static_cast<__half*>(x), targets, vocab, scale, smoothing, loss);
      break;
    default:
      ce_loss_and_grad<__nv_bfloat16, kBlock><<<grid, kBlock, 0, stream>>>(
          static_cast<__nv_bfloat16*>(x), targets, vocab, scale, smoothing, loss);
      break;
  }
}

cudaError_t cross_entropy_loss_and_grad(int dtype, void* x, const int64_t* targets, int64_t rows,
                                        int64_t vocab, float scale, float smoothing, float* loss,
                                        int threads, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  if (threads == 256)
    launch_loss_and_grad<256>(dtype, x, targets, rows, vocab, scale, smoothing, loss, stream);
  else if (threads == 512)
    launch_loss_and_grad<512>(dtype, x, targets, rows, vocab, scale, smoothing, loss, stream);
  else
    launch_loss_and_grad<1024>(dtype, x, targets, rows, vocab, scale, smoothing, loss, stream);
  return cudaGetLastError();
}

}  // namespace dtrain::cuda
