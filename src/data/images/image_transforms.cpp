// torchvision's crop geometry and PIL's bilinear resampling (image_transforms.h). The resampling
// follows PIL's Resample.c (precompute_coeffs, normalize_coeffs_8bpc, ImagingResampleInner):
// the same coefficients, the same 22-bit fixed point, the same rounding and clipping.
#include "data/images/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dtrain::detail {
namespace {

uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Python's int(round(x)) for the x >= 0 of the crop geometry: halves to even.
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS for 8-bit images
static_assert(kResampleOne == 1 << kPrecisionBits, "the taps' fixed point is PIL's");

double bilinear(double x) {  // PIL's bilinear_filter, support 1
  if (x < 0) x = -x;
  return x < 1 ? 1 - x : 0;
}

inline uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

}  // namespace

SampleRandom::SampleRandom(uint64_t seed, int64_t epoch, int64_t index)
    : state_(mix(mix(mix(seed + 0x6A09E667F3BCC909ull) ^ static_cast<uint64_t>(epoch)) ^
                 (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull))) {}

uint64_t SampleRandom::next() { return mix(state_ += 0x9E3779B97F4A7C15ull); }

double SampleRandom::uniform(double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1.0p-53);
}

int64_t SampleRandom::below(int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(n)) >>
                              64);
}

bool random_flip(SampleRandom& random) { return random.uniform(0, 1) < 0.5; }

PadCrop random_pad_crop(int64_t padding, bool hflip, SampleRandom& random) {
  PadCrop p;
  // The padded image is 2 padding larger than the crop each way: torch.randint(0, 2 padding + 1).
  const int64_t top = random.below(2 * padding + 1);
  const int64_t left = random.below(2 * padding + 1);
  p.dy = padding - top;  // crop row y is the padded image's y + top, the input's y + top - padding
  p.dx = padding - left;
  p.flip = hflip && random_flip(random);
  return p;
}

void pad_crop(const uint8_t* in, int64_t planes, int64_t height, int64_t width, const PadCrop& p,
              uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(planes * height * width));
  // The input columns [x0, x1) land in the output; rows likewise.
  const int64_t x0 = std::max<int64_t>(0, -p.dx), x1 = std::min(width, width - p.dx);
  const int64_t y0 = std::max<int64_t>(0, -p.dy), y1 = std::min(height, height - p.dy);
  if (x0 >= x1 || y0 >= y1) return;
  for (int64_t c = 0; c < planes; ++c) {
    const uint8_t* src = in + c * height * width;
    uint8_t* dst = out + c * height * width;
    for (int64_t y = y0; y < y1; ++y) {
      const uint8_t* s = src + y * width;
      uint8_t* d = dst + (y + p.dy) * width;
      if (!p.flip) {
        std::memcpy(d + x0 + p.dx, s + x0, static_cast<size_t>(x1 - x0));
      } else {  // input column x lands at x + dx, mirrored to width - 1 - (x + dx)
        for (int64_t x = x0; x < x1; ++x) d[width - 1 - (x + p.dx)] = s[x];
      }
    }
  }
}

CropBox random_resized_crop(int64_t width, int64_t height, const std::vector<double>& scale,
                            const std::vector<double>& ratio, SampleRandom& random) {
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * random.uniform(scale[0], scale[1]);
    const double aspect = std::exp(random.uniform(log_lo, log_hi));
    const int64_t w = round_half_even(std::sqrt(target * aspect));
    const int64_t h = round_half_even(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t top = random.below(height - h + 1);
      const int64_t left = random.below(width - w + 1);
      return CropBox{top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = round_half_even(static_cast<double>(w) / ratio[0]);
  } else if (in_ratio > ratio[1]) {
    w = round_half_even(static_cast<double>(h) * ratio[1]);
  }
  return CropBox{(height - h) / 2, (width - w) / 2, h, w};
}

CenterCrop resize_center_crop(int64_t width, int64_t height, int64_t resize, int64_t size) {
  CenterCrop c;
  const bool portrait = width <= height;
  const int64_t shorter = portrait ? width : height, longer = portrait ? height : width;
  const auto stretched =
      static_cast<int64_t>(static_cast<double>(resize * longer) / static_cast<double>(shorter));
  c.resized_width = portrait ? resize : stretched;
  c.resized_height = portrait ? stretched : resize;
  c.crop.height = c.crop.width = size;
  c.crop.top = round_half_even(static_cast<double>(c.resized_height - size) / 2.0);
  c.crop.left = round_half_even(static_cast<double>(c.resized_width - size) / 2.0);
  return c;
}

void plan_taps(ResampleTaps& t, int64_t in_size, double in0, double in1, int64_t out_size,
               int64_t out_first, int64_t out_count, bool fixed) {
  t.identity = out_size == in_size && in0 == 0 && in1 == static_cast<double>(in_size);
  t.offset = out_first;
  if (t.identity) return;
  const double scale = (in1 - in0) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.assign(static_cast<size_t>(out_count), 0);
  t.count.assign(static_cast<size_t>(out_count), 0);
  t.weights.assign(static_cast<size_t>(out_count * t.ksize), 0);
  std::vector<double> k(static_cast<size_t>(t.ksize));
  for (int64_t o = 0; o < out_count; ++o) {
    const double center = in0 + (static_cast<double>(out_first + o) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // PIL truncates toward zero, then clamps.
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = bilinear((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    int32_t* out = t.weights.data() + o * t.ksize;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[static_cast<size_t>(x)] / ww : k[static_cast<size_t>(x)];
      out[x] = static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                          : 0.5 + w * (1 << kPrecisionBits));
    }
    t.first[static_cast<size_t>(o)] = xmin;
    t.count[static_cast<size_t>(o)] = std::max<int64_t>(xmax, 0);
  }
  // Every output index reads ksize taps when the source is that long: the zero weights past a
  // window's end add nothing, and a fixed count lets the horizontal pass unroll. A window near
  // the end moves back so that its taps stay inside the source (its weights move with it).
  t.fixed = fixed && in_size >= t.ksize;
  if (!t.fixed) return;
  for (int64_t o = 0; o < out_count; ++o) {
    int64_t& first = t.first[static_cast<size_t>(o)];
    const int64_t shift = std::max<int64_t>(0, first + t.ksize - in_size);
    if (shift > 0) {
      int32_t* w = t.weights.data() + o * t.ksize;
      std::memmove(w + shift, w, static_cast<size_t>(t.ksize - shift) * sizeof(int32_t));
      std::fill(w, w + shift, 0);
      first -= shift;
    }
    t.count[static_cast<size_t>(o)] = t.ksize;
  }
}

std::pair<int64_t, int64_t> taps_span(const ResampleTaps& t, int64_t out_count) {
  if (t.identity || t.first.empty()) return {t.offset, t.offset + out_count};
  int64_t first = t.first.front(), end = t.first.back() + t.count.back();
  for (size_t o = 0; o < t.first.size(); ++o) {
    first = std::min(first, t.first[o]);
    end = std::max(end, t.first[o] + t.count[o]);
  }
  return {first, end};
}

void unit_taps(ResampleTaps& t, int64_t out_count) {
  t.ksize = 1;
  t.first.resize(static_cast<size_t>(out_count));
  for (int64_t o = 0; o < out_count; ++o) t.first[static_cast<size_t>(o)] = o + t.offset;
  t.count.assign(static_cast<size_t>(out_count), 1);
  t.weights.assign(static_cast<size_t>(out_count), kResampleOne);
  t.fixed = true;
  t.identity = false;
}

namespace {

// One row of the horizontal pass, K taps per output pixel (K = 0: each pixel's own count).
template <int K>
void horizontal_row(const uint8_t* in, uint8_t* out, int64_t width, const int64_t* first,
                    const int64_t* count, const int32_t* weights, int64_t ksize) {
  for (int64_t o = 0; o < width; ++o) {
    const int32_t* k = weights + o * ksize;
    const uint8_t* p = in + first[o] * 3;
    int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
    const int64_t n = K > 0 ? K : count[o];
    for (int64_t x = 0; x < n; ++x) {
      s0 += p[x * 3 + 0] * k[x];
      s1 += p[x * 3 + 1] * k[x];
      s2 += p[x * 3 + 2] * k[x];
    }
    out[o * 3 + 0] = clip8(s0);
    out[o * 3 + 1] = clip8(s1);
    out[o * 3 + 2] = clip8(s2);
  }
}

}  // namespace

void Resampler::run(const RgbView& image, const ResamplePlan& plan, uint8_t* planes) {
  const RgbView src = image.sub(plan.region);
  const Box& box = plan.box;
  const CropBox& window = plan.window;
  const int64_t grid_width = plan.grid_width, grid_height = plan.grid_height;
  const int64_t ow = window.width, oh = window.height;
  plan_taps(h_, src.width, box.x0, box.x1, grid_width, window.left, ow, /*fixed=*/true);
  plan_taps(v_, src.height, box.y0, box.y1, grid_height, window.top, oh, /*fixed=*/false);
  // The source rows the vertical pass reads: [y_first, y_end).
  const auto [y_first, y_end] = taps_span(v_, oh);
  // Horizontal pass: rows [y_first, y_end) of src, resampled to the window's columns.
  const int64_t row_bytes = ow * 3;
  const uint8_t* rows = nullptr;
  int64_t rows_stride = 0;
  if (h_.identity) {
    rows = src.data + y_first * src.stride + h_.offset * 3;
    rows_stride = src.stride;
  } else {
    rows_.resize(static_cast<size_t>((y_end - y_first) * row_bytes));
    auto row = &horizontal_row<0>;
    if (h_.fixed && h_.ksize == 3) row = &horizontal_row<3>;
    if (h_.fixed && h_.ksize == 5) row = &horizontal_row<5>;
    if (h_.fixed && h_.ksize == 7) row = &horizontal_row<7>;
    if (h_.fixed && h_.ksize == 9) row = &horizontal_row<9>;
    for (int64_t y = y_first; y < y_end; ++y)
      row(src.data + y * src.stride, rows_.data() + (y - y_first) * row_bytes, ow, h_.first.data(),
          h_.count.data(), h_.weights.data(), h_.ksize);
    rows = rows_.data();
    rows_stride = row_bytes;
  }
  // Vertical pass, each output row a weighted sum of whole rows (vectorizes), then split into
  // the three planes (mirrored when flipping).
  const int64_t plane = ow * oh;
  acc_.resize(static_cast<size_t>(row_bytes));
  for (int64_t o = 0; o < oh; ++o) {
    const uint8_t* line = nullptr;
    if (v_.identity) {
      line = rows + (o + v_.offset - y_first) * rows_stride;
    } else {
      std::fill(acc_.begin(), acc_.end(), 1 << (kPrecisionBits - 1));
      const int32_t* k = v_.weights.data() + o * v_.ksize;
      const int64_t first = v_.first[static_cast<size_t>(o)] - y_first;
      int32_t* acc = acc_.data();
      for (int64_t y = 0, n = v_.count[static_cast<size_t>(o)]; y < n; ++y) {
        const uint8_t* r = rows + (first + y) * rows_stride;
        const int32_t w = k[y];
        for (int64_t i = 0; i < row_bytes; ++i) acc[i] += r[i] * w;
      }
    }
    uint8_t* r = planes + o * ow;
    uint8_t* g = r + plane;
    uint8_t* b = g + plane;
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t d = plan.flip ? ow - 1 - x : x;
      if (line != nullptr) {
        r[d] = line[x * 3 + 0], g[d] = line[x * 3 + 1], b[d] = line[x * 3 + 2];
      } else {
        r[d] = clip8(acc_[static_cast<size_t>(x * 3 + 0)]);
        g[d] = clip8(acc_[static_cast<size_t>(x * 3 + 1)]);
        b[d] = clip8(acc_[static_cast<size_t>(x * 3 + 2)]);
      }
    }
  }
}

}  // namespace dtrain::detail
