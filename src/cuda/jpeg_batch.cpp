// CUDA build: the GPU JPEG decoder of a loader thread (jpeg_batch.h). CUDA runtime and nvJPEG
// (through src/cuda/nvjpeg.h) only, no LibTorch.
//
// A batch goes in chunks. For each: the chunk's resampling jobs and taps are written to a pinned
// staging buffer and copied to the device buffer in one copy; nvJPEG's batched decode writes each
// image (whole, or the box jpeg_roi() set: nvjpegDecodeBatchedEx with each image's ROI) as its Y,
// Cb and Cr planes into the device buffer; the two resampling passes
// (resample.cu) go through a row buffer into the batch's output; then the thread waits on an
// event (a blocking wait, not a spin: the loader threads share the run's few cores) before it
// reuses the buffers. The chunks and their layout in the two buffers: jpeg_chunks.h.
#include "cuda/jpeg_batch.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "cuda/check.h"
#include "cuda/jpeg_chunks.h"
#include "cuda/nvjpeg.h"
#include "cuda/resample.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

constexpr nvjpeg::Status kNotDecoded = -1;  // not an nvJPEG status: a chunk not tried

void check_nvjpeg(nvjpeg::Status s, const char* what) {
  if (s != nvjpeg::kSuccess)
    throw Error(std::string("nvJPEG: ") + what + " failed: " + nvjpeg::status_name(s));
}

}  // namespace

struct JpegBatchDecoder::Impl {
  const nvjpeg::Api* api = nullptr;
  int device = 0;
  bool hardware = false;
  nvjpeg::Handle handle = nullptr;
  nvjpeg::State state = nullptr;
  nvjpeg::Stream parsed = nullptr;  // supports()'s parse
  cudaEvent_t done = nullptr;
  uint8_t* dev = nullptr;  // device buffer
  size_t dev_cap = 0;
  uint8_t* host = nullptr;  // pinned staging
  size_t host_cap = 0;
  // One chunk's inputs to nvJPEG, reused.
  std::vector<const unsigned char*> data;
  std::vector<size_t> lengths;
  std::vector<nvjpeg::Image> dest;
  // Region decodes: one parameter set per place in a chunk (set_boxes); `roi_failed` once a
  // region decode failed (roi() is false from then on: whole images only).
  std::vector<nvjpeg::DecodeParams> params;
  bool roi_failed = false;

  ~Impl() {
    if (done != nullptr) cudaEventSynchronize(done);
    for (nvjpeg::DecodeParams p : params) api->params_destroy(p);
    if (parsed != nullptr) api->stream_destroy(parsed);
    if (state != nullptr) api->state_destroy(state);
    if (handle != nullptr) api->destroy(handle);
    if (done != nullptr) cudaEventDestroy(done);
    nvjpeg::device_free(dev);
    nvjpeg::pinned_free(host);
  }

  // params[0, n) set to the n images' boxes (the whole image where a box is unset), made as
  // chunks grow.
  nvjpeg::Status set_boxes(const GpuJpeg* images, size_t n) {
    while (params.size() < n) {
      nvjpeg::DecodeParams p = nullptr;
      check_nvjpeg(api->params_create(handle, &p), "nvjpegDecodeParamsCreate");
      params.push_back(p);
    }
    nvjpeg::Status rc = nvjpeg::kSuccess;
    for (size_t k = 0; k < n && rc == nvjpeg::kSuccess; ++k) {
      const GpuJpeg& g = images[k];
      rc = g.roi_width > 0
               ? api->params_set_roi(params[k], g.roi_x, g.roi_y, g.roi_width, g.roi_height)
               : api->params_set_roi(params[k], 0, 0, -1, -1);
    }
    return rc;
  }

  // The buffers hold at least (device, host) bytes: grown (never shrunk) to the chunk limits,
  // or past them for a single image that needs more.
  void reserve(size_t device_bytes, size_t host_bytes) {
    if (device_bytes > dev_cap) {
      nvjpeg::device_free(dev);
      dev = nullptr, dev_cap = 0;
      const size_t want = std::max(device_bytes, kJpegChunkDeviceBytes);
      dev = static_cast<uint8_t*>(nvjpeg::device_alloc(want));
      if (dev == nullptr)
        throw Error("the GPU JPEG decoder cannot allocate " + std::to_string(want >> 20) +
                    " MiB of device memory (data.decode: gpu; cpu decodes on the host)");
      dev_cap = want;
    }
    if (host_bytes > host_cap) {
      nvjpeg::pinned_free(host);
      host = nullptr, host_cap = 0;
      const size_t want = std::max(host_bytes, kJpegChunkHostBytes);
      host = static_cast<uint8_t*>(nvjpeg::pinned_alloc(want));
      if (host == nullptr)
        throw Error("the GPU JPEG decoder cannot allocate " + std::to_string(want >> 20) +
                    " MiB of pinned host memory");
      host_cap = want;
    }
  }
};

JpegBatchDecoder::JpegBatchDecoder(int device) : impl_(std::make_unique<Impl>()) {
  const NvjpegStatus status = nvjpeg_status();
  if (!status.usable) throw Error("cannot decode JPEGs on the GPU: " + status.text, "data.decode");
  Impl& m = *impl_;
  m.api = nvjpeg::api();
  m.device = device;
  DTRAIN_CUDA_CHECK(cudaSetDevice(device));
  // The GPU's JPEG engines where it has them (A100, H100, H200: nvjpegCreateEx refuses the
  // hardware backend elsewhere), nvJPEG's CUDA decoder otherwise.
  m.hardware =
      m.api->create_ex(nvjpeg::kBackendHardware, nvjpeg::counted_device_allocator(),
                       nvjpeg::counted_pinned_allocator(), 0, &m.handle) == nvjpeg::kSuccess;
  if (!m.hardware) {
    m.handle = nullptr;
    const nvjpeg::Status rc =
        m.api->create_ex(nvjpeg::kBackendDefault, nvjpeg::counted_device_allocator(),
                         nvjpeg::counted_pinned_allocator(), 0, &m.handle);
    if (rc != nvjpeg::kSuccess) m.handle = nullptr;
    check_nvjpeg(rc, "nvjpegCreateEx");
  }
  check_nvjpeg(m.api->state_create(m.handle, &m.state), "nvjpegJpegStateCreate");
  // The hardware decoder's memory pool, as NVIDIA's nvImageCodec sets it up (sizes of 1: the pool
  // grows to the batches it meets); without it the decoder may allocate for every batch. A
  // failure leaves the decoder as it was.
  if (m.hardware && m.api->batched_pre_allocate != nullptr)
    m.api->batched_pre_allocate(m.handle, m.state, 1, 1, 1, nvjpeg::kCss444, nvjpeg::kOutputYuv);
  check_nvjpeg(m.api->stream_create(m.handle, &m.parsed), "nvjpegJpegStreamCreate");
  DTRAIN_CUDA_CHECK(
      cudaEventCreateWithFlags(&m.done, cudaEventBlockingSync | cudaEventDisableTiming));
}

JpegBatchDecoder::~JpegBatchDecoder() = default;

const char* JpegBatchDecoder::backend() const { return impl_->hardware ? "hardware" : "CUDA"; }

bool JpegBatchDecoder::roi() const {
  const Impl& m = *impl_;
  return m.hardware && m.api->batched_ex != nullptr && !m.roi_failed;
}

bool JpegBatchDecoder::supports(const uint8_t* data, size_t size) {
  Impl& m = *impl_;
  if (!m.hardware) return true;
  // The header is all the check reads; the decode parses the whole stream again anyway.
  const nvjpeg::Status parsed = m.api->stream_parse_header != nullptr
                                    ? m.api->stream_parse_header(m.handle, data, size, m.parsed)
                                    : m.api->stream_parse(m.handle, data, size, 0, 0, m.parsed);
  if (parsed != nvjpeg::kSuccess) return false;
  int verdict = 1;
  return m.api->batched_supported(m.handle, m.parsed, &verdict) == nvjpeg::kSuccess && verdict == 0;
}

std::vector<size_t> JpegBatchDecoder::run(const std::vector<GpuJpeg>& images,
                                          const std::vector<int32_t>& taps, int64_t size,
                                          uint8_t* out, void* stream_ptr) {
  Impl& m = *impl_;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  DTRAIN_CUDA_CHECK(cudaSetDevice(m.device));
  std::vector<size_t> refused;
  size_t i = 0;
  while (i < images.size()) {
    // The chunk [i, e) and its layout (jpeg_chunks.h): as many images as the buffers hold, at
    // least one, growing them if it alone needs more.
    const JpegChunk c = jpeg_chunk(images, i, size, std::max(m.host_cap, kJpegChunkHostBytes),
                                   std::max(m.dev_cap, kJpegChunkDeviceBytes));
    const size_t e = c.end, n = e - i, staged = c.staged;
    m.reserve(c.device, staged);
    // Staging: the jobs (device addresses), then the taps; the device buffer mirrors it, then
    // holds the decoded images and the row buffers.
    auto* jobs = reinterpret_cast<cuda::ResampleJob*>(m.host);
    auto* tap_host = reinterpret_cast<int32_t*>(m.host + c.jobs_bytes);
    const auto* tap_dev = reinterpret_cast<const int32_t*>(m.dev + c.jobs_bytes);
    m.data.resize(n), m.lengths.resize(n), m.dest.resize(n);
    int max_rows = 1;
    for (size_t k = 0; k < n; ++k) {
      const GpuJpeg& g = images[i + k];
      std::memcpy(tap_host + c.taps[k], taps.data() + g.taps,
                  jpeg_taps_count(g, size) * sizeof(int32_t));
      jobs[k] = cuda::resample_job(g, m.dev + c.image[k], m.dev + c.rows[k], out,
                                   tap_dev + c.taps[k], size);
      max_rows = std::max(max_rows, jobs[k].rows);
      m.data[k] = g.data, m.lengths[k] = g.size;
      nvjpeg::Image& d = m.dest[k];
      std::memset(&d, 0, sizeof d);
      for (int p = 0; p < jobs[k].planes; ++p)
        d.channel[p] = const_cast<uint8_t*>(jobs[k].plane[p]),
        d.pitch[p] = static_cast<size_t>(jobs[k].pitch[p]);
    }
    DTRAIN_CUDA_CHECK(cudaMemcpyAsync(m.dev, m.host, staged, cudaMemcpyHostToDevice, stream));
    const bool boxes = std::any_of(images.begin() + static_cast<std::ptrdiff_t>(i),
                                   images.begin() + static_cast<std::ptrdiff_t>(e),
                                   [](const GpuJpeg& g) { return g.roi_width > 0; });
    // Boxes after a region decode failed (earlier in this batch) go to the CPU as well.
    nvjpeg::Status rc = boxes && !roi()
                            ? kNotDecoded
                            : m.api->batched_initialize(m.handle, m.state, static_cast<int>(n), 1,
                                                        nvjpeg::kOutputYuv);
    if (rc == nvjpeg::kSuccess && boxes) {
      rc = m.set_boxes(images.data() + i, n);
      if (rc == nvjpeg::kSuccess)
        rc = m.api->batched_ex(m.handle, m.state, m.data.data(), m.lengths.data(), m.dest.data(),
                               m.params.data(), stream);
      // Decoded on the CPU below, as a refused chunk is; later batches go whole.
      if (rc != nvjpeg::kSuccess) m.roi_failed = true;
    } else if (rc == nvjpeg::kSuccess) {
      rc =
          m.api->batched(m.handle, m.state, m.data.data(), m.lengths.data(), m.dest.data(), stream);
    }
    if (rc != nvjpeg::kSuccess) {
      for (size_t k = i; k < e; ++k) refused.push_back(k);
    } else {
      DTRAIN_CUDA_CHECK(cuda::resample_batch(reinterpret_cast<const cuda::ResampleJob*>(m.dev),
                                             static_cast<int>(n), static_cast<int>(size), max_rows,
                                             stream));
    }
    DTRAIN_CUDA_CHECK(cudaEventRecord(m.done, stream));
    DTRAIN_CUDA_CHECK(cudaEventSynchronize(m.done));
    i = e;
  }
  return refused;
}

void JpegBatchDecoder::upload(const std::vector<int64_t>& slots, const uint8_t* planes,
                              int64_t size, uint8_t* out, void* stream_ptr) {
  Impl& m = *impl_;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  DTRAIN_CUDA_CHECK(cudaSetDevice(m.device));
  const size_t image = static_cast<size_t>(3 * size * size);
  m.reserve(0, image);
  const size_t per_chunk = std::max<size_t>(1, m.host_cap / image);
  for (size_t i = 0; i < slots.size(); i += per_chunk) {
    const size_t e = std::min(slots.size(), i + per_chunk);
    for (size_t k = i; k < e; ++k) {
      uint8_t* staged = m.host + (k - i) * image;
      std::memcpy(staged, planes + static_cast<size_t>(slots[k]) * image, image);
      DTRAIN_CUDA_CHECK(cudaMemcpyAsync(out + static_cast<size_t>(slots[k]) * image, staged, image,
                                        cudaMemcpyHostToDevice, stream));
    }
    DTRAIN_CUDA_CHECK(cudaEventRecord(m.done, stream));
    DTRAIN_CUDA_CHECK(cudaEventSynchronize(m.done));
  }
}

}  // namespace dtrain::detail
