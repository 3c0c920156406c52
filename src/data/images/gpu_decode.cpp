// data.decode (Note [GPU decoding]): the choice, the frame check, and one batch's assembly for
// the GPU decoder (src/cuda/jpeg_batch.h).
#include "data/images/gpu_decode.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "cuda/jpeg_roi.h"
#include "cuda/streams.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

int read16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

// Whether a SOFn marker (frame header): C0..CF but DHT (C4), JPG (C8) and DAC (CC).
bool is_frame(int marker) {
  return marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
}

}  // namespace

DecodeChoice choose_decode(DecodeMode mode, const at::Device& device, int decoding_threads) {
  return choose_decode(
      mode, device, decoding_threads,
      mode != DecodeMode::kCpu && device.is_cuda() ? nvjpeg_status() : NvjpegStatus{});
}

DecodeChoice choose_decode(DecodeMode mode, const at::Device& device, int decoding_threads,
                           const NvjpegStatus& nvjpeg) {
  if (mode == DecodeMode::kCpu) return {false, "data.decode cpu"};
  const bool cuda = device.is_cuda();
  if (mode == DecodeMode::kGpu) {
    if (!cuda)
      throw Error("gpu needs a CUDA device, and this rank computes on " + device.str() +
                      " (run.device): set data.decode to cpu or auto",
                  "data.decode");
    if (!nvjpeg.usable)
      throw Error("gpu needs nvJPEG: " + nvjpeg.text + "; set data.decode to cpu or auto",
                  "data.decode");
    return {true, "data.decode gpu: " + nvjpeg.text + " on " + device.str()};
  }
  if (!cuda) return {false, "data.decode auto: the CPU, as this rank computes on " + device.str()};
  if (!nvjpeg.usable) return {false, "data.decode auto: the CPU, as " + nvjpeg.text};
  const std::string threads =
      std::to_string(decoding_threads) + " loader thread(s) can decode at once";
  if (decoding_threads >= kCpuDecodeThreads)
    return {false, "data.decode auto: the CPU, as " + threads + " (" +
                       std::to_string(kCpuDecodeThreads) +
                       " or more keep up with a fast GPU, and the GPU's decoder takes GPU time "
                       "from training)"};
  return {true, "data.decode auto: the GPU, " + nvjpeg.text + " on " + device.str() + ", as only " +
                    threads + " (fewer than " + std::to_string(kCpuDecodeThreads) + ")"};
}

JpegFrame jpeg_frame(const uint8_t* data, size_t n) {
  // The markers up to the first frame header; each segment is FF, its code, a 16-bit length.
  JpegFrame f;
  size_t at = 2;
  while (at + 4 <= n) {
    if (data[at] != 0xff) {
      f.error = "a JPEG whose markers cannot be followed";
      return f;
    }
    const int code = data[at + 1];
    if (code == 0xff) {  // fill byte
      ++at;
      continue;
    }
    if (code == 0xd8 || code == 0x01 || (code >= 0xd0 && code <= 0xd7)) {  // no length
      at += 2;
      continue;
    }
    if (code == 0xda || code == 0xd9) break;  // a scan or the end before any frame header
    const size_t length = static_cast<size_t>(read16(data + at + 2));
    const uint8_t* body = data + at + 4;
    const size_t body_n = std::min(length < 2 ? 0 : length - 2, n - (at + 4));
    if (is_frame(code)) {
      f.marker = code;
      if (body_n < 6) break;
      f.precision = body[0], f.components = body[5];
      if (body_n < 6 + 3 * static_cast<size_t>(f.components)) break;
      for (int c = 0; c < std::min(f.components, 4); ++c) {
        const uint8_t* spec = body + 6 + 3 * c;
        f.id[c] = spec[0], f.h[c] = spec[1] >> 4, f.v[c] = spec[1] & 15;
      }
      f.complete = true;
      return f;
    }
    // libjpeg's rules: a JFIF APP0 holds at least 14 bytes, an Adobe APP14 at least 12.
    if (code == 0xe0 && body_n >= 14 && std::memcmp(body, "JFIF\0", 5) == 0) f.jfif = true;
    if (code == 0xee && body_n >= 12 && std::memcmp(body, "Adobe", 5) == 0)
      f.adobe_transform = body[11];
    at += 2 + length;
  }
  return f;
}

namespace {

// log2(luma / chroma) when that is 0, 1 or 2 (chroma sampled at 1, 1/2 or 1/4 of luma), else -1.
int sampling_shift(int luma, int chroma) {
  if (chroma <= 0 || luma % chroma != 0) return -1;
  const int ratio = luma / chroma;
  return ratio == 1 ? 0 : ratio == 2 ? 1 : ratio == 4 ? 2 : -1;
}

}  // namespace

std::string jpeg_refusal(const uint8_t* data, size_t n) {
  const JpegFrame f = jpeg_frame(data, n);
  if (!f.error.empty()) return f.error;
  if (f.marker == 0 || !f.complete) return "a JPEG without a readable frame header";
  const int marker = f.marker;
  if (marker == 0xc2 || marker == 0xc6 || marker == 0xca || marker == 0xce)
    return "a progressive JPEG";
  if (marker != 0xc0 && marker != 0xc1)
    return "a JPEG that is neither baseline nor sequential Huffman-coded";
  if (f.precision != 8) return "a JPEG of " + std::to_string(f.precision) + "-bit samples";
  if (f.components != 1 && f.components != 3)
    return "a JPEG of " + std::to_string(f.components) + " components (CMYK)";
  if (f.components == 3) {
    // libjpeg's reading of three components: YCbCr after a JFIF marker; else RGB by an Adobe
    // marker's transform 0, or without one by the component ids R, G, B.
    const bool rgb =
        !f.jfif && (f.adobe_transform == 0 ||
                    (f.adobe_transform < 0 && f.id[0] == 'R' && f.id[1] == 'G' && f.id[2] == 'B'));
    if (rgb) return "a JPEG of RGB components (no YCbCr)";
    for (int c = 1; c < 3; ++c)
      if (sampling_shift(f.h[0], f.h[c]) < 0 || sampling_shift(f.v[0], f.v[c]) < 0)
        return "a JPEG whose chroma is not sampled at 1, 1/2 or 1/4 of the luma";
  }
  // The end-of-image marker, past any zero padding: a truncated file lacks it.
  size_t end = n;
  while (end > 2 && data[end - 1] == 0) --end;
  if (end < 4 || data[end - 2] != 0xff || data[end - 1] != 0xd9)
    return "a JPEG without its end marker";
  return "";
}

void set_planes(const JpegFrame& f, GpuJpeg& g) {
  g.planes = f.components == 1 ? 1 : 3;
  for (int c = 0; c < 2; ++c) {
    g.shift_x[c] = g.planes == 1 ? 0 : std::max(0, sampling_shift(f.h[0], f.h[c + 1]));
    g.shift_y[c] = g.planes == 1 ? 0 : std::max(0, sampling_shift(f.v[0], f.v[c + 1]));
  }
}

GpuImageBatch::GpuImageBatch(const at::Device& device)
    : device_(device),
      decoder_(std::make_unique<JpegBatchDecoder>(
          static_cast<int>(device.index() < 0 ? 0 : device.index()))) {}

GpuImageBatch::~GpuImageBatch() = default;

const char* GpuImageBatch::backend() const { return decoder_->backend(); }

void GpuImageBatch::start(int64_t n, int64_t size) {
  n_ = n, size_ = size;
  if (static_cast<int64_t>(bytes_.size()) < n) bytes_.resize(static_cast<size_t>(n));
  const auto plane_bytes = static_cast<size_t>(n * 3 * size * size);
  if (planes_.size() < plane_bytes) planes_.resize(plane_bytes);
  on_gpu_.assign(static_cast<size_t>(n), false);
  jpegs_.clear();
  taps_.clear();
}

std::vector<uint8_t>& GpuImageBatch::bytes(int64_t k) { return bytes_[static_cast<size_t>(k)]; }

uint8_t* GpuImageBatch::planes(int64_t k) { return planes_.data() + k * 3 * size_ * size_; }

std::string GpuImageBatch::refusal(int64_t k, size_t n) {
  const uint8_t* data = bytes_[static_cast<size_t>(k)].data();
  std::string why = jpeg_refusal(data, n);
  if (why.empty() && !decoder_->supports(data, n))
    why = std::string("a JPEG nvJPEG's ") + decoder_->backend() + " decoder does not take";
  return why;
}

GpuJpeg gpu_jpeg(int64_t width, int64_t height, const ResamplePlan& plan, int64_t size,
                 std::vector<int32_t>& taps, ResampleTaps& h, ResampleTaps& v) {
  const CropBox& region = plan.region;
  const Box& box = plan.box;
  plan_taps(h, region.width, box.x0, box.x1, plan.grid_width, plan.window.left, size,
            /*fixed=*/true);
  if (h.identity) unit_taps(h, size);
  plan_taps(v, region.height, box.y0, box.y1, plan.grid_height, plan.window.top, size,
            /*fixed=*/false);
  const auto [rows_first, rows_end] = taps_span(v, size);
  if (v.identity) unit_taps(v, size);
  GpuJpeg g;
  g.width = static_cast<int32_t>(width), g.height = static_cast<int32_t>(height);
  g.left = static_cast<int32_t>(region.left), g.top = static_cast<int32_t>(region.top);
  g.rows_first = static_cast<int32_t>(rows_first), g.rows_end = static_cast<int32_t>(rows_end);
  g.h_ksize = static_cast<int32_t>(h.ksize), g.v_ksize = static_cast<int32_t>(v.ksize);
  g.taps = static_cast<int64_t>(taps.size());
  g.flip = plan.flip;
  for (const ResampleTaps* t : {&h, &v}) {
    for (int64_t f : t->first) taps.push_back(static_cast<int32_t>(f));
    for (int64_t c : t->count) taps.push_back(static_cast<int32_t>(c));
    taps.insert(taps.end(), t->weights.begin(), t->weights.begin() + size * t->ksize);
  }
  return g;
}

void GpuImageBatch::add(int64_t k, size_t n, int64_t width, int64_t height,
                        const ResamplePlan& plan) {
  GpuJpeg g = gpu_jpeg(width, height, plan, size_, taps_, h_, v_);
  g.data = bytes_[static_cast<size_t>(k)].data();
  set_planes(jpeg_frame(g.data, n), g);
  if (decoder_->roi()) jpeg_roi(g, taps_.data() + g.taps, size_);
  g.size = n;
  g.slot = k;
  jpegs_.push_back(g);
  on_gpu_[static_cast<size_t>(k)] = true;
}

at::Tensor GpuImageBatch::finish(const std::function<void(int64_t, uint8_t*)>& cpu,
                                 int64_t& refused) {
  const int64_t s = size_;
  at::Tensor out = empty_on_loader_stream({n_, 3, s, s}, at::kByte, device_);
  const std::vector<size_t> failed =
      decoder_->run(jpegs_, taps_, s, out.data_ptr<uint8_t>(), loader_stream(device_));
  refused = static_cast<int64_t>(failed.size());
  for (size_t i : failed) {
    const int64_t k = jpegs_[i].slot;
    cpu(k, planes(k));
    on_gpu_[static_cast<size_t>(k)] = false;
  }
  // The samples decoded on the CPU, uploaded on the same stream (done when it returns).
  std::vector<int64_t> host;
  for (int64_t k = 0; k < n_; ++k)
    if (!on_gpu_[static_cast<size_t>(k)]) host.push_back(k);
  if (!host.empty())
    decoder_->upload(host, planes_.data(), s, out.data_ptr<uint8_t>(), loader_stream(device_));
  return out;
}

GpuBatchPool::Lease::~Lease() {
  {
    std::lock_guard<std::mutex> lock(pool_.mu_);
    pool_.idle_.push_back(std::move(batch_));
  }
  pool_.returned_.notify_one();
}

GpuBatchPool::Lease GpuBatchPool::take() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    returned_.wait(lock, [&] { return !idle_.empty() || made_ < most_; });
    if (!idle_.empty()) {
      std::unique_ptr<GpuImageBatch> b = std::move(idle_.back());
      idle_.pop_back();
      return Lease(*this, std::move(b));
    }
    ++made_;  // counted before it is made, so that no other thread passes the limit meanwhile
  }
  try {
    return Lease(*this, std::make_unique<GpuImageBatch>(device_));
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --made_;
    }
    returned_.notify_one();
    throw;
  }
}

int GpuBatchPool::made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

}  // namespace dtrain::detail
