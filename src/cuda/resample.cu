// PIL's bilinear resampling on the GPU (resample.h): one thread per output pixel and pass, the
// three channels together; each thread's work is resample_pixel.h's, compiled for the device.
#define DTRAIN_HOST_DEVICE __host__ __device__ __forceinline__
#include "cuda/resample.h"

namespace dtrain::cuda {
namespace {

constexpr int kThreads = 128;

// Every region row of mid: blockIdx.y strides over them.
__global__ void horizontal(const ResampleJob* jobs, int size) {
  const ResampleJob j = jobs[blockIdx.z];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= size) return;
  for (int r = blockIdx.y; r < j.rows; r += gridDim.y) horizontal_pixel(j, size, x, r);
}

__global__ void vertical(const ResampleJob* jobs, int size) {
  const ResampleJob j = jobs[blockIdx.z];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= size) return;
  vertical_pixel(j, size, x, blockIdx.y);
}

}  // namespace

cudaError_t resample_batch(const ResampleJob* jobs, int n, int size, int max_rows,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned cols = static_cast<unsigned>((size + kThreads - 1) / kThreads);
  const unsigned rows =
      static_cast<unsigned>(max_rows < 1 ? 1 : (max_rows > 65535 ? 65535 : max_rows));
  horizontal<<<dim3(cols, rows, static_cast<unsigned>(n)), kThreads, 0, stream>>>(jobs, size);
  vertical<<<dim3(cols, static_cast<unsigned>(size), static_cast<unsigned>(n)), kThreads, 0,
             stream>>>(jobs, size);
  return cudaGetLastError();
}

}  // namespace dtrain::cuda
