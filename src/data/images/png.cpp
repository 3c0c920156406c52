// PNG decoding with libpng, into 8-bit RGB as PIL converts it (image_codec.h). libpng reports
// errors by longjmp, so the decode runs in a function of C-style locals (read_png) whose results
// live in the caller's objects, and the message is copied out before the jump.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data/images/image_codec.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

struct Source {
  const uint8_t* data;
  size_t size, offset;
  char message[256];  // the first error or warning libpng reported
};

void read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<Source*>(png_get_io_ptr(png));
  if (n > src->size - src->offset) {
    std::snprintf(src->message, sizeof src->message,
                  "truncated: %zu bytes wanted at byte offset %zu of %zu", static_cast<size_t>(n),
                  src->offset, src->size);
    png_longjmp(png, 1);
  }
  std::memcpy(out, src->data + src->offset, n);
  src->offset += n;
}

void on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<Source*>(png_get_error_ptr(png));
  if (src->message[0] == 0) std::snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}

// libpng's warnings concern ancillary chunks (a color profile it distrusts, say) and leave the
// pixels intact; PIL ignores them as well. Damaged image data is an error, not a warning.
void on_warning(png_structp, png_const_charp) {}

// The decode between setjmp and libpng's longjmp: false on failure, with the reason in
// src.message. Its own locals are set before setjmp and not changed after it; what it fills
// (rows, out) belongs to the caller.
bool read_png(Source& src, std::vector<png_bytep>& rows, RgbImage& out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, &src, read_bytes);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int color = png_get_color_type(png, info);
  // To 8-bit RGB: palettes and low bit depths expanded (grey of 1, 2, 4 bits scaled to 0..255,
  // as PIL's "1", "L;2", "L;4"), 16 bits to the high byte, grey replicated, alpha (and tRNS,
  // which the expansion turns into alpha) dropped without compositing, as PIL's convert("RGB").
  png_set_expand(png);
  png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      row_bytes != size_t{w} * 3) {
    std::snprintf(src.message, sizeof src.message, "color type %d did not convert to 8-bit RGB",
                  color);
    png_longjmp(png, 1);
  }
  out.width = w, out.height = h;
  const size_t bytes = size_t{w} * h * 3;
  if (out.pixels.size() < bytes) out.pixels.resize(bytes);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out.pixels.data() + size_t{y} * row_bytes;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);  // the chunks after the image data, and the last CRCs
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

void decode_png(const uint8_t* data, size_t n, const std::string& path, RgbImage& out) {
  Source src{data, n, 0, {0}};
  std::vector<png_bytep> rows;
  if (!read_png(src, rows, out))
    throw Error(path + ": cannot decode this PNG (" + std::to_string(n) +
                " bytes): libpng: " + (src.message[0] ? src.message : "cannot start libpng"));
}

}  // namespace dtrain::detail
