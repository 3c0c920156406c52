// Vectors of V adjacent elements that dtrain's kernels load and store in one access (16 bytes of
// fp32, fp16 or bf16 when V = 16 / sizeof(T)), converted to and from fp32 (element_types.cuh).
// The caller makes sure the pointer is aligned to the pack.
#pragma once

#include "cuda/element_types.cuh"

namespace dtrain::cuda {

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

}  // namespace dtrain::cuda
