// Max-pooling over channels-last activations with a one-byte record of each maximum's place and a
// gathering backward (Note [max-pool kernels] in cuda/max_pool.h). Each thread owns V adjacent
// channels (16-byte loads when C is a multiple of V and the tensors are aligned, else V = 1) of
// one output element (forward) or one input element (backward).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/element_types.cuh"
#include "cuda/max_pool_args.h"
#include "cuda/packs.cuh"

namespace dtrain::cuda {
namespace {

constexpr int kThreads = 256;

// Thread i's element of an NHWC tensor of `vectors` channel vectors a pixel and h x w pixels:
// its vector, column, row and image.
template <typename I>
struct Element {
  int v, x, y;
  I n;
};
template <typename I>
__device__ __forceinline__ Element<I> element(I i, I vectors, int h, int w) {
  Element<I> e;
  e.v = static_cast<int>(i % vectors);
  I p = i / vectors;
  e.x = static_cast<int>(p % w);
  p /= w;
  e.y = static_cast<int>(p % h);
  e.n = p / h;
  return e;
}

// The forward: out = the window's maximum, where = its place in the window (row * kernel +
// column); the first of equal maxima, and NaN over any number (the last NaN), as ATen's kernel.
template <typename T, int V, typename I>
__global__ void __launch_bounds__(kThreads)
    max_pool_fwd(const T* __restrict__ x, T* __restrict__ out, uint8_t* __restrict__ where,
                 MaxPoolArgs a) {
  const I vectors = a.c / V;
  const I total = static_cast<I>(a.n) * a.out_h * a.out_w * vectors;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const Element<I> e = element<I>(i, vectors, a.out_h, a.out_w);
    const int v = e.v, ow = e.x, oh = e.y;
    const I n = e.n;
    const int h0 = oh * a.stride - a.padding, w0 = ow * a.stride - a.padding;
    const int hs = h0 < 0 ? 0 : h0, ws = w0 < 0 ? 0 : w0;
    const int he = min(h0 + a.kernel, a.h), we = min(w0 + a.kernel, a.w);
    float best[V];
    uint8_t at[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      best[k] = -INFINITY;
      at[k] = static_cast<uint8_t>((hs - h0) * a.kernel + (ws - w0));
    }
    for (int ih = hs; ih < he; ++ih) {
      const T* row = x + ((n * a.h + ih) * a.w) * a.c + v * V;
      for (int iw = ws; iw < we; ++iw) {
        const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(row + static_cast<I>(iw) * a.c);
        const uint8_t here = static_cast<uint8_t>((ih - h0) * a.kernel + (iw - w0));
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float val = to_float(pk.v[k]);
          if (val > best[k] || isnan(val)) {
            best[k] = val;
            at[k] = here;
          }
        }
      }
    }
    Pack<T, V> o;
    Pack<uint8_t, V> w;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      o.v[k] = from_float<T>(best[k]);
      w.v[k] = at[k];
    }
    *reinterpret_cast<Pack<T, V>*>(out + i * V) = o;
    *reinterpret_cast<Pack<uint8_t, V>*>(where + i * V) = w;
  }
}

// The backward: each input element sums, in window order, the gradients of the windows whose
// recorded maximum it is (0 where none).
template <typename T, int V, typename I>
__global__ void __launch_bounds__(kThreads)
    max_pool_bwd(const T* __restrict__ dout, const uint8_t* __restrict__ where, T* __restrict__ dx,
                 MaxPoolArgs a) {
  const I vectors = a.c / V;
  const I total = static_cast<I>(a.n) * a.h * a.w * vectors;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const Element<I> e = element<I>(i, vectors, a.h, a.w);
    const int v = e.v, iw = e.x, ih = e.y;
    const I n = e.n;
    // The windows that hold (ih, iw): oh * stride - padding <= ih < oh * stride - padding + kernel.
    const int hn = ih + a.padding - a.kernel + 1, wn = iw + a.padding - a.kernel + 1;
    const int oh0 = hn <= 0 ? 0 : (hn + a.stride - 1) / a.stride;
    const int ow0 = wn <= 0 ? 0 : (wn + a.stride - 1) / a.stride;
    const int oh1 = min((ih + a.padding) / a.stride, a.out_h - 1);
    const int ow1 = min((iw + a.padding) / a.stride, a.out_w - 1);
    float sum[V];
#pragma unroll
    for (int k = 0; k < V; ++k) sum[k] = 0.f;
    for (int oh = oh0; oh <= oh1; ++oh) {
      for (int ow = ow0; ow <= ow1; ++ow) {
        const I o = (((n * a.out_h + oh) * a.out_w + ow) * vectors + v) * V;
        const uint8_t here = static_cast<uint8_t>((ih - (oh * a.stride - a.padding)) * a.kernel +
                                                  (iw - (ow * a.stride - a.padding)));
        const Pack<uint8_t, V> w = *reinterpret_cast<const Pack<uint8_t, V>*>(where + o);
        const Pack<T, V> g = *reinterpret_cast<const Pack<T, V>*>(dout + o);
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (w.v[k] == here) sum[k] += to_float(g.v[k]);
      }
    }
    Pack<T, V> d;
#pragma unroll
    for (int k = 0; k < V; ++k) d.v[k] = from_float<T>(sum[k]);
    *reinterpret_cast<Pack<T, V>*>(dx + i * V) = d;
  }
}

int blocks_for(int64_t threads) {
  const int64_t b = (threads + kThreads - 1) / kThreads;
  return static_cast<int>(b < (1 << 30) ? (b > 0 ? b : 1) : (1 << 30));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Calls f(T{}, V, I{}) for the dtype, the widest V the channels and pointers allow, and 32-bit
// indices where every index fits.
template <typename F>
cudaError_t dispatch(const MaxPoolArgs& a, bool aligned, F&& f) {
  const int64_t elements = a.n * static_cast<int64_t>(a.h > a.out_h ? a.h : a.out_h) *
                           (a.w > a.out_w ? a.w : a.out_w) * a.c;
  const bool small = elements < INT_MAX;
  auto by_type = [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = 16 / static_cast<int>(sizeof(T));
    const bool wide = aligned && a.c % kV == 0;
    if (small) {
      return wide ? f(tag, std::integral_constant<int, kV>{}, int{})
                  : f(tag, std::integral_constant<int, 1>{}, int{});
    }
    return wide ? f(tag, std::integral_constant<int, kV>{}, int64_t{})
                : f(tag, std::integral_constant<int, 1>{}, int64_t{});
  };
  switch (a.dtype) {
    case 0:
      return by_type(float{});
    case 1:
      return by_type(__half{});
    default:
      return by_type(__nv_bfloat16{});
  }
}

}  // namespace

cudaError_t max_pool_forward(const MaxPoolArgs& a, const void* x, void* out, uint8_t* where,
                             cudaStream_t stream) {
  if (a.n == 0 || a.c == 0) return cudaSuccess;
  const bool aligned = aligned16(x) && aligned16(out) && aligned16(where);
  return dispatch(a, aligned, [&](auto tag, auto v, auto index) {
    using T = decltype(tag);
    constexpr int kV = decltype(v)::value;
    const int64_t threads = a.n * a.out_h * a.out_w * (a.c / kV);
    max_pool_fwd<T, kV, decltype(index)><<<blocks_for(threads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), where, a);
    return cudaGetLastError();
  });
}

cudaError_t max_pool_backward(const MaxPoolArgs& a, const void* dout, const uint8_t* where,
                              void* dx, cudaStream_t stream) {
  if (a.n == 0 || a.c == 0) return cudaSuccess;
  const bool aligned = aligned16(dout) && aligned16(where) && aligned16(dx);
  return dispatch(a, aligned, [&](auto tag, auto v, auto index) {
    using T = decltype(tag);
    constexpr int kV = decltype(v)::value;
    const int64_t threads = a.n * a.h * a.w * (a.c / kV);
    max_pool_bwd<T, kV, decltype(index)><<<blocks_for(threads), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), where, static_cast<T*>(dx), a);
    return cudaGetLastError();
  });
}

}  // namespace dtrain::cuda
