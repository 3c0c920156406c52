// What the max-pool kernels (cuda/max_pool.cu) take: plain pointers and sizes, shared by the
// kernels and their autograd wrapper (cuda/max_pool.cpp). Activations are NHWC rows of c channels
// in the dtype coded as cuda/dtype_code.h says; `where` holds, per output element, the position
// (row * kernel + column) of its window's maximum.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtrain::cuda {

struct MaxPoolArgs {
  int dtype = 0;
  int64_t n = 0;
  int c = 0, h = 0, w = 0;   // input
  int out_h = 0, out_w = 0;  // output
  int kernel = 3, stride = 2, padding = 1;
};

// out (n, out_h, out_w, c) and where (the same shape, bytes) from x (n, h, w, c).
cudaError_t max_pool_forward(const MaxPoolArgs& a, const void* x, void* out, uint8_t* where,
                             cudaStream_t stream);
// dx (n, h, w, c) from dout (n, out_h, out_w, c) and the forward's where; every element written.
cudaError_t max_pool_backward(const MaxPoolArgs& a, const void* dout, const uint8_t* where,
                              void* dx, cudaStream_t stream);

}  // namespace dtrain::cuda
