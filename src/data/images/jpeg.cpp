// JPEG decoding with libjpeg-turbo's TurboJPEG API (version 2 calls, which TurboJPEG 3 keeps),
// and the format sniffing of image_codec.h.
#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "data/images/image_codec.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

std::string hex_start(const uint8_t* data, size_t size) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    char b[4];
    std::snprintf(b, sizeof b, "%02x", data[i]);
    s += (i ? " " : "") + std::string(b);
  }
  return s.empty() ? "nothing" : s;
}

// PIL's CMYK -> RGB (Convert.c, cmyk2rgb): channel = (255 - K) - C (255 - K) / 255 with PIL's
// rounding of the product. libjpeg gives Adobe CMYK inverted (as Photoshop writes it, and PIL
// reads it as "CMYK;I"), so C = 255 - stored C and 255 - K = stored K.
inline uint8_t cmyk_channel(uint8_t stored_c, uint8_t stored_k) {
  const int c = 255 - stored_c, nk = stored_k;
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff;
}
bool is_png(const uint8_t* data, size_t size) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return size >= 8 && std::memcmp(data, kPng, 8) == 0;
}
}  // namespace

bool is_image(const uint8_t* data, size_t size) {
  return is_jpeg(data, size) || is_png(data, size);
}

ImageFormat sniff_image(const uint8_t* data, size_t size, const std::string& path) {
  if (is_jpeg(data, size)) return ImageFormat::kJpeg;
  if (is_png(data, size)) return ImageFormat::kPng;
  throw Error(path + ": neither a JPEG nor a PNG (" + std::to_string(size) +
              " bytes, starting with " + hex_start(data, size) + ")");
}

JpegDecoder::JpegDecoder() : handle_(tjInitDecompress()) {
  if (handle_ == nullptr)
    throw Error(std::string("cannot start libjpeg-turbo's decompressor: ") +
                tjGetErrorStr2(nullptr));
  int n = 0;
  const tjscalingfactor* f = tjGetScalingFactors(&n);
  for (int i = 0; f != nullptr && i < n; ++i)
    if (f[i].num == 1 && (f[i].denom == 2 || f[i].denom == 4 || f[i].denom == 8))
      scales_.push_back(JpegScale{f[i].num, f[i].denom});
  std::sort(scales_.begin(), scales_.end(), [](const JpegScale& a, const JpegScale& b) {
    return a.num * b.denom < b.num * a.denom;
  });
}

JpegDecoder::~JpegDecoder() { tjDestroy(handle_); }

void JpegDecoder::header(const uint8_t* data, size_t n, const std::string& path, int& width,
                         int& height, int& colorspace) {
  int subsamp = 0;
  width = height = colorspace = 0;
  if (tjDecompressHeader3(handle_, data, static_cast<unsigned long>(n), &width, &height, &subsamp,
                          &colorspace) != 0)
    throw Error(path + ": not a readable JPEG (" + std::to_string(n) +
                " bytes): libjpeg-turbo: " + tjGetErrorStr2(handle_));
  if (width < 1 || height < 1)
    throw Error(path + ": not a readable JPEG (" + std::to_string(n) +
                " bytes): its header gives " + std::to_string(width) + "x" +
                std::to_string(height) + " pixels");
}

std::pair<int64_t, int64_t> JpegDecoder::size(const uint8_t* data, size_t n,
                                              const std::string& path) {
  int w = 0, h = 0, colorspace = 0;
  header(data, n, path, w, h, colorspace);
  return {w, h};
}

JpegScale JpegDecoder::scale_for(double need_w, double need_h, int64_t out_w, int64_t out_h) const {
  for (const JpegScale& s : scales_) {  // smallest first
    const double f = static_cast<double>(s.num) / s.denom;
    if (need_w * f >= static_cast<double>(out_w) && need_h * f >= static_cast<double>(out_h))
      return s;
  }
  return JpegScale{1, 1};  // full size
}

void JpegDecoder::decode(const uint8_t* data, size_t n, const std::string& path, JpegScale scale,
                         RgbImage& out) {
  int w = 0, h = 0, colorspace = 0;
  header(data, n, path, w, h, colorspace);
  auto* tj = static_cast<tjhandle>(handle_);
  const int64_t sw = scale.scaled(w), sh = scale.scaled(h);
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  out.width = sw, out.height = sh;
  if (out.pixels.size() < static_cast<size_t>(sw * sh * 3))
    out.pixels.resize(static_cast<size_t>(sw * sh * 3));
  uint8_t* dst = out.pixels.data();
  if (cmyk) {
    if (cmyk_.size() < static_cast<size_t>(sw * sh * 4))
      cmyk_.resize(static_cast<size_t>(sw * sh * 4));
    dst = cmyk_.data();
  }
  // No flags: accurate integer IDCT and smooth chroma upsampling, libjpeg's defaults and PIL's.
  // A warning (TJERR_WARNING: a truncated file, corrupt entropy data) returns -1 as well: the
  // pixels may be partly invented, so it is an error too.
  const int rc = tjDecompress2(tj, data, static_cast<unsigned long>(n), dst, static_cast<int>(sw),
                               0, static_cast<int>(sh), cmyk ? TJPF_CMYK : TJPF_RGB, 0);
  if (rc != 0)
    throw Error(path + ": cannot decode this JPEG (" + std::to_string(w) + "x" + std::to_string(h) +
                ", " + std::to_string(n) + " bytes): libjpeg-turbo: " + tjGetErrorStr2(tj) +
                (tjGetErrorCode(tj) == TJERR_WARNING
                     ? " (a warning: the file is damaged or truncated)"
                     : ""));
  if (cmyk) {
    const uint8_t* in = cmyk_.data();
    uint8_t* o = out.pixels.data();
    for (int64_t i = 0; i < sw * sh; ++i, in += 4, o += 3) {
      o[0] = cmyk_channel(in[0], in[3]);
      o[1] = cmyk_channel(in[1], in[3]);
      o[2] = cmyk_channel(in[2], in[3]);
    }
  }
}

}  // namespace dtrain::detail
