// The element types dtrain's kernels read and write (fp32, fp16, bf16), converted to and from the
// fp32 they compute in; and the dtype codes their host entry points take (0 fp32, 1 fp16, 2 bf16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace dtrain::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

}  // namespace dtrain::cuda
