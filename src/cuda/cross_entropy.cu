// Cross-entropy over rows of logits for large vocabularies, in two kernels that read the logits
// in their own precision (fp32, fp16 or bf16) and compute in fp32:
//   forward:  lse[r] = logsumexp(x[r, :]);  loss[r] = lse[r] - x[r, t[r]]
//   backward: dx[r, i] = (exp(x[r, i] - lse[r]) - [i == t[r]]) * scale * g
// where g is the incoming gradient of the reduced loss, read from device memory (no host sync,
// so a training step that uses it can be captured in a CUDA graph). One block per row; the
// forward is one pass (online max/sum), the backward writes each gradient element once, possibly
// over the logits themselves (each thread reads an element before it writes it).
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

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_forward(const T* __restrict__ x, const int64_t* __restrict__ targets, int64_t vocab,
               float* __restrict__ loss, float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * vocab;
  float m = -FLT_MAX, s = 0.f;
  auto add = [&](float v) {
    if (v > m) {
      s = (m == -FLT_MAX ? 0.f : s * expf(m - v)) + 1.f;
      m = v;
    } else {
      s += expf(v - m);
    }
  };
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte load
  if (vocab % kVec == 0 && reinterpret_cast<uintptr_t>(xr) % 16 == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    for (int64_t i = threadIdx.x; i < vocab / kVec; i += kThreads) {
      const uint4 raw = xv[i];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < kVec; ++k) add(to_float(e[k]));
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) add(to_float(xr[i]));
  }
  // Warp, then block reduction of (m, s).
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    merge(m, s, m2, s2);
  }
  __shared__ float sm[kThreads / 32], ss[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sm[warp] = m, ss[warp] = s;
  __syncthreads();
  if (warp == 0) {
    m = lane < kThreads / 32 ? sm[lane] : -FLT_MAX;
    s = lane < kThreads / 32 ? ss[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
      merge(m, s, m2, s2);
    }
    if (lane == 0) {
      const float l = m + logf(s);
      const int64_t t = targets[row];
      lse[row] = l;
      // A class id outside [0, vocab) makes the loss NaN (visible) instead of reading elsewhere.
      loss[row] = t >= 0 && t < vocab ? l - to_float(xr[t]) : __int_as_float(0x7fc00000);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_backward(const T* x, const int64_t* __restrict__ targets, int64_t vocab,
                const float* __restrict__ lse, const float* __restrict__ grad, float scale,
                T* dx) {  // dx may be x (in place): not __restrict__
  const int64_t row = blockIdx.x;
  const T* xr = x + row * vocab;
  T* dr = dx + row * vocab;
  const float l = lse[row], g = *grad * scale;
  const int64_t t = targets[row];
  constexpr int kVec = 16 / sizeof(T);
  if (vocab % kVec == 0 && reinterpret_cast<uintptr_t>(xr) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(dr) % 16 == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    uint4* dv = reinterpret_cast<uint4*>(dr);
    for (int64_t i = threadIdx.x; i < vocab / kVec; i += kThreads) {
      const uint4 raw = xv[i];
      const T* e = reinterpret_cast<const T*>(&raw);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int64_t j = i * kVec + k;
        o[k] = from_float<T>((expf(to_float(e[k]) - l) - (j == t ? 1.f : 0.f)) * g);
      }
      dv[i] = out;
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float p = expf(to_float(xr[i]) - l);
      dr[i] = from_float<T>((p - (i == t ? 1.f : 0.f)) * g);
    }
  }
}

template <typename T>
void launch(const void* x, const int64_t* targets, int64_t rows, int64_t vocab, float* loss,
            float* lse, cudaStream_t stream) {
  if (rows == 0) return;
  ce_forward<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const T*>(x), targets, vocab, loss, lse);
}

template <typename T>
void launch_backward(const void* x, const int64_t* targets, int64_t rows, int64_t vocab,
                     const float* lse, const float* grad, float scale, void* dx,
                     cudaStream_t stream) {
  if (rows == 0) return;
  ce_backward<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const T*>(x), targets, vocab, lse, grad, scale, static_cast<T*>(dx));
}

}  // namespace

// dtype: 0 = fp32, 1 = fp16, 2 = bf16. Returns the launch error (cudaSuccess when launched).
cudaError_t cross_entropy_forward(int dtype, const void* x, const int64_t* targets, int64_t rows,
                                  int64_t vocab, float* loss, float* lse, cudaStream_t stream) {
  switch (dtype) {
    case 0: launch<float>(x, targets, rows, vocab, loss, lse, stream); break;
    case 1: launch<__half>(x, targets, rows, vocab, loss, lse, stream); break;
    default: launch<__nv_bfloat16>(x, targets, rows, vocab, loss, lse, stream); break;
  }
  return cudaGetLastError();
}

cudaError_t cross_entropy_backward(int dtype, const void* x, const int64_t* targets, int64_t rows,
                                   int64_t vocab, const float* lse, const float* grad, float scale,
                                   void* dx, cudaStream_t stream) {
  switch (dtype) {
    case 0: launch_backward<float>(x, targets, rows, vocab, lse, grad, scale, dx, stream); break;
    case 1: launch_backward<__half>(x, targets, rows, vocab, lse, grad, scale, dx, stream); break;
    default:
      launch_backward<__nv_bfloat16>(x, targets, rows, vocab, lse, grad, scale, dx, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace dtrain::cuda
