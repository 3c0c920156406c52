// Image decoding for data.format image_folder: JPEG through libjpeg-turbo's TurboJPEG API, PNG
// through libpng, both into 8-bit RGB as PIL's Image.open(f).convert("RGB") gives it (torchvision's
// ImageFolder loader): grayscale replicated into the three channels, alpha dropped (not
// composited), palettes looked up, CMYK converted with PIL's formula. PNG pixels equal PIL's;
// JPEG pixels equal PIL's when PIL uses the same libjpeg-turbo (Debian's does). The file's first
// bytes, not its name, pick the decoder. Every failure, a decoder's warning included (a truncated
// JPEG decodes with one), is an Error naming the file and carrying the decoder's message.
// A decoder object holds per-thread state: one per loader thread, never shared.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::detail {

// (height, width, 3) 8-bit RGB pixels, interleaved, row after row. The buffer only grows, so one
// image object serves all of a batch's decodes without reallocating.
struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
  const uint8_t* row(int64_t y) const { return pixels.data() + y * width * 3; }
};

enum class ImageFormat { kJpeg, kPng };

// JPEG (FF D8 FF) or PNG (its 8-byte signature) from the first bytes; an Error naming `path`
// (and the bytes it found) for anything else.
ImageFormat sniff_image(const uint8_t* data, size_t size, const std::string& path);
// Whether the first bytes are a JPEG's or a PNG's (sniff_image's test, without the error).
bool is_image(const uint8_t* data, size_t size);

// A JPEG's shrink factor: libjpeg-turbo decodes at `num / denom` of the full size (in the DCT,
// far cheaper than decoding everything and shrinking after), each side TJSCALED: ceil(side x
// num / denom).
struct JpegScale {
  int num = 1, denom = 1;
  int64_t scaled(int64_t side) const { return (side * num + denom - 1) / denom; }
};

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // The full-size (width, height) from the header.
  std::pair<int64_t, int64_t> size(const uint8_t* data, size_t n, const std::string& path);
  // The smallest of the scales 1/8, 1/4, 1/2 whose image still holds a region of `need_w` x
  // `need_h` full-size pixels at `out_w` x `out_h` pixels or more; 1/1 when none does. Only
  // these: libjpeg-turbo's reduced IDCTs for them are SIMD code (or, for 1/8, the DC term
  // alone), while its scales 3/8 ... 7/8 run C code slower than a full-size decode.
  JpegScale scale_for(double need_w, double need_h, int64_t out_w, int64_t out_h) const;
  // Decodes at `scale` into `out` (out.width = scale.scaled(width), the same for the height).
  void decode(const uint8_t* data, size_t n, const std::string& path, JpegScale scale,
              RgbImage& out);

 private:
  // The header's size and color space; an Error naming `path` when unreadable or empty.
  void header(const uint8_t* data, size_t n, const std::string& path, int& width, int& height,
              int& colorspace);
  void* handle_;                   // tjhandle
  std::vector<uint8_t> cmyk_;      // CMYK JPEGs decode here before conversion
  std::vector<JpegScale> scales_;  // 1/8, 1/4, 1/2 as libjpeg-turbo offers them, smallest first
};

// Any PNG: bit depths 1 to 16 (16-bit samples keep their high byte, as PIL's RGB modes do),
// palettes, grayscale, alpha, interlacing.
void decode_png(const uint8_t* data, size_t n, const std::string& path, RgbImage& out);

}  // namespace dtrain::detail
