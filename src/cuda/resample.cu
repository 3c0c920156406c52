// PIL's bilinear resampling on the GPU (resample.h): one thread per output pixel and pass, the
// three channels together.
#include "cuda/resample.h"

namespace dtrain::cuda {
namespace {

constexpr int kPrecisionBits = 22;  // PIL's PRECISION_BITS for 8-bit images
constexpr int kThreads = 128;

__device__ __forceinline__ uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// mid[r][x] = the horizontal taps of column x over region row rows_first + r.
__global__ void horizontal(const ResampleJob* jobs, int size) {
  const ResampleJob j = jobs[blockIdx.z];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= size) return;
  const int32_t* first = j.taps;
  const int32_t* count = first + size;
  const int32_t* w = count + size + static_cast<int64_t>(x) * j.h_ksize;
  const int32_t f = first[x], n = count[x];
  for (int r = blockIdx.y; r < j.rows; r += gridDim.y) {
    const uint8_t* p = j.src + static_cast<int64_t>(j.rows_first + r) * j.src_pitch + static_cast<int64_t>(f) * 3;
    int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
    for (int k = 0; k < n; ++k) {
      const int32_t wk = w[k];
      s0 += p[k * 3 + 0] * wk;
      s1 += p[k * 3 + 1] * wk;
      s2 += p[k * 3 + 2] * wk;
    }
    uint8_t* m = j.mid + (static_cast<int64_t>(r) * size + x) * 3;
    m[0] = clip8(s0), m[1] = clip8(s1), m[2] = clip8(s2);
  }
}

// out[c][y][x'] = the vertical taps of row y over mid's column x (x' mirrored when flipping).
__global__ void vertical(const ResampleJob* jobs, int size) {
  const ResampleJob j = jobs[blockIdx.z];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y;
  if (x >= size) return;
  const int32_t* v = j.taps + static_cast<int64_t>(size) * (2 + j.h_ksize);
  const int32_t* first = v;
  const int32_t* count = first + size;
  const int32_t* w = count + size + static_cast<int64_t>(y) * j.v_ksize;
  const int32_t f = first[y] - j.rows_first, n = count[y];
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int k = 0; k < n; ++k) {
    const uint8_t* m = j.mid + (static_cast<int64_t>(f + k) * size + x) * 3;
    const int32_t wk = w[k];
    s0 += m[0] * wk;
    s1 += m[1] * wk;
    s2 += m[2] * wk;
  }
  const int d = j.flip ? size - 1 - x : x;
  const int64_t plane = static_cast<int64_t>(size) * size;
  uint8_t* o = j.out + static_cast<int64_t>(y) * size + d;
  o[0] = clip8(s0), o[plane] = clip8(s1), o[2 * plane] = clip8(s2);
}

}  // namespace

cudaError_t resample_batch(const ResampleJob* jobs, int n, int size, int max_rows, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned cols = static_cast<unsigned>((size + kThreads - 1) / kThreads);
  const unsigned rows = static_cast<unsigned>(max_rows < 1 ? 1 : (max_rows > 65535 ? 65535 : max_rows));
  horizontal<<<dim3(cols, rows, static_cast<unsigned>(n)), kThreads, 0, stream>>>(jobs, size);
  vertical<<<dim3(cols, static_cast<unsigned>(size), static_cast<unsigned>(n)), kThreads, 0, stream>>>(jobs, size);
  return cudaGetLastError();
}

}  // namespace dtrain::cuda
