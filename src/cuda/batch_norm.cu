// The fused BatchNorm's launches (Note [fused BatchNorm] in cuda/fused_batch_norm.h): the
// kernels of batch_norm_kernels.cuh, their grid shapes, and the dispatch on dtype, vector width,
// shortcut, ReLU and mask. With SyncBatchNorm (BnForwardArgs::local, BnBackwardArgs::local) each
// direction runs in two calls, its reduction alone, then, after the caller's exchange, the rest.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/batch_norm_args.h"
#include "cuda/batch_norm_kernels.cuh"

namespace dtrain::cuda {
namespace {

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
    case 0:
      return f(float{});
    case 1:
      return f(__half{});
    default:
      return f(__nv_bfloat16{});
  }
}

template <bool B, typename F>
cudaError_t with_bool_impl(F&& f) {
  return f(std::integral_constant<bool, B>{});
}
template <typename F>
cudaError_t with_bool(bool b, F&& f) {
  return b ? with_bool_impl<true>(f) : with_bool_impl<false>(f);
}

template <int M, typename F>
cudaError_t with_mask_impl(F&& f) {
  return f(std::integral_constant<int, M>{});
}
template <typename F>
cudaError_t with_mask(int m, F&& f) {
  switch (m) {
    case kMaskFromY:
      return with_mask_impl<kMaskFromY>(f);
    case kMaskFromBits:
      return with_mask_impl<kMaskFromBits>(f);
    case kMaskFromX:
      return with_mask_impl<kMaskFromX>(f);
    default:
      return with_mask_impl<kMaskNone>(f);
  }
}

// y = relu(x * scale + shift + r), with the ReLU's bits where the forward writes them.
template <typename T, int V>
cudaError_t apply_pass(const BnForwardArgs& a, cudaStream_t stream) {
  const T* x = static_cast<const T*>(a.x);
  const Shape s = apply_shape(a.rows, a.c, V);
  return with_bool(a.residual != nullptr, [&](auto res) {
    return with_bool(a.relu, [&](auto rl) {
      if constexpr (V == kMaskChannels<T>) {
        if (a.bits != nullptr) {
          bn_apply<T, V, decltype(res)::value, decltype(rl)::value, true>
              <<<s.grid, s.block, 0, stream>>>(x, static_cast<const T*>(a.residual),
                                               static_cast<T*>(a.y), a.bits, a.scale, a.shift,
                                               a.rows, a.c);
          return cudaGetLastError();
        }
      }
      bn_apply<T, V, decltype(res)::value, decltype(rl)::value, false>
          <<<s.grid, s.block, 0, stream>>>(x, static_cast<const T*>(a.residual),
                                           static_cast<T*>(a.y), nullptr, a.scale, a.shift, a.rows,
                                           a.c);
      return cudaGetLastError();
    });
  });
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
    if (e != cudaSuccess || (a.training && a.local != nullptr)) return e;
    return apply_pass<T, V>(a, stream);
  }
};

// SyncBatchNorm, after the exchange: the merged statistics, then the pointwise pass.
template <typename T>
struct ForwardFinish {
  template <int V>
  static cudaError_t run(const BnForwardArgs& a, cudaStream_t stream) {
    bn_sync_stats<<<ceil_div(a.c, 256), 256, 0, stream>>>(a);
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : apply_pass<T, V>(a, stream);
  }
};

// dx = k1 g + kx (x - mean) + kb, g read from the shortcut's gradient where the reduction wrote
// it (summed and masked already), else from dy [+ dy2] masked here.
template <typename T, int V>
cudaError_t dx_pass(const BnBackwardArgs& a, cudaStream_t stream) {
  const T* dy = static_cast<const T*>(a.dy);
  const T* dy2 = static_cast<const T*>(a.dy2);
  const T* y = static_cast<const T*>(a.y);
  const T* x = static_cast<const T*>(a.x);
  T* g = static_cast<T*>(a.g);
  const bool written = g != nullptr;
  const T* g_in = written ? g : dy;
  const Shape s = apply_shape(a.rows, a.c, V);
  return with_mask(a.relu && !written ? a.mask : kMaskNone, [&](auto mask) {
    return with_bool(dy2 != nullptr && !written, [&](auto two) {
      bn_bwd_dx<T, V, decltype(mask)::value, decltype(two)::value><<<s.grid, s.block, 0, stream>>>(
          a, g_in, dy2, y, x, static_cast<T*>(a.dx), a.mean, a.k1, a.kx, a.kb, a.rows, a.c);
      return cudaGetLastError();
    });
  });
}

template <typename T>
struct Backward {
  template <int V>
  static cudaError_t run(const BnBackwardArgs& a, cudaStream_t stream) {
    const T* dy = static_cast<const T*>(a.dy);
    const T* dy2 = static_cast<const T*>(a.dy2);
    const T* y = static_cast<const T*>(a.y);
    const T* x = static_cast<const T*>(a.x);
    T* g = static_cast<T*>(a.g);
    const Shape rs = reduce_shape(a.rows, a.c, V, a.sms);
    cudaError_t e = with_mask(a.relu ? a.mask : kMaskNone, [&](auto mask) {
      return with_bool(g != nullptr, [&](auto write) {
        return with_bool(dy2 != nullptr, [&](auto two) {
          bn_bwd_reduce<T, V, decltype(mask)::value, decltype(write)::value, decltype(two)::value>
              <<<rs.grid, rs.block, 0, stream>>>(dy, dy2, y, x, g, a);
          return cudaGetLastError();
        });
      });
    });
    if (e != cudaSuccess || a.local != nullptr) return e;
    return dx_pass<T, V>(a, stream);
  }
};

// SyncBatchNorm, after the sums' all-reduce: the coefficients, then dx.
template <typename T>
struct BackwardFinish {
  template <int V>
  static cudaError_t run(const BnBackwardArgs& a, cudaStream_t stream) {
    bn_bwd_coefficients<<<ceil_div(a.c, 256), 256, 0, stream>>>(a);
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : dx_pass<T, V>(a, stream);
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

int batch_norm_mask_channels(const BnForwardArgs& a) {
  const int per_byte = a.dtype == 0 ? 4 : 8;  // kMaskChannels: one 16-byte vector
  const bool aligned = aligned16(a.x) && aligned16(a.y) && (!a.residual || aligned16(a.residual));
  return aligned && a.c % per_byte == 0 ? per_byte : 0;
}

namespace {

bool forward_aligned(const BnForwardArgs& a) {
  return aligned16(a.x) && aligned16(a.y) && (!a.residual || aligned16(a.residual));
}

bool backward_aligned(const BnBackwardArgs& a) {
  return aligned16(a.dy) && aligned16(a.x) && aligned16(a.dx) && (!a.dy2 || aligned16(a.dy2)) &&
         (!a.relu || a.mask != kMaskFromY || aligned16(a.y)) && (!a.g || aligned16(a.g));
}

}  // namespace

// A SyncBatchNorm rank with no rows still takes part in the exchange: its reduction writes zeros
// (no rows, no sums), and the finish writes what the other ranks' rows give.
cudaError_t batch_norm_forward(const BnForwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0 && a.training && a.local != nullptr)
    return cudaMemsetAsync(a.local, 0, (2 * static_cast<size_t>(a.c) + 1) * sizeof(double), stream);
  if (a.rows == 0) return cudaSuccess;
  return dispatch<Forward>(a, forward_aligned(a), stream);
}

cudaError_t batch_norm_forward_finish(const BnForwardArgs& a, cudaStream_t stream) {
  return dispatch<ForwardFinish>(a, forward_aligned(a), stream);
}

cudaError_t batch_norm_backward(const BnBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0 && a.local != nullptr)
    return cudaMemsetAsync(a.local, 0, 2 * static_cast<size_t>(a.c) * sizeof(double), stream);
  if (a.rows == 0) return cudaSuccess;
  return dispatch<Backward>(a, backward_aligned(a), stream);
}

cudaError_t batch_norm_backward_finish(const BnBackwardArgs& a, cudaStream_t stream) {
  return dispatch<BackwardFinish>(a, backward_aligned(a), stream);
}

}  // namespace dtrain::cuda
