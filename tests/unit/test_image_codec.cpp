// Image decoding (data/images/image_codec.h) against PIL: PNGs of every color type give PIL's
// convert("RGB") pixels exactly, JPEGs within one level (the same libjpeg-turbo: in practice
// exactly), scaled JPEG decodes libjpeg's own scaled output (PIL's draft); the decoder is chosen
// by content; every damaged file is an error naming it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/images/image_codec.h"
#include "image_reference.h"
#include "test_support.h"

namespace {

using dtrain::detail::decode_png;
using dtrain::detail::ImageFormat;
using dtrain::detail::JpegDecoder;
using dtrain::detail::JpegScale;
using dtrain::detail::RgbImage;
using dtrain::detail::sniff_image;
using dtrain::test::ImageReference;
using dtrain::test::max_difference;
using dtrain::test::message_of;
using dtrain::test::read_bytes;
using dtrain::test::TempDir;
using dtrain::test::write_bytes;

std::vector<uint8_t> rgb_of(const RgbImage& image) {
  return std::vector<uint8_t>(image.pixels.begin(),
                              image.pixels.begin() + image.width * image.height * 3);
}

RgbImage decode_file(const std::string& path, JpegScale scale = {}) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  RgbImage image;
  if (sniff_image(bytes.data(), bytes.size(), path) == ImageFormat::kPng) {
    decode_png(bytes.data(), bytes.size(), path, image);
  } else {
    JpegDecoder jpeg;
    jpeg.decode(bytes.data(), bytes.size(), path, scale, image);
  }
  return image;
}

TEST(ImageCodec, PngOfEveryColorTypeDecodesToPilsPixels) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  // RGB, RGBA and grey + alpha (alpha dropped), grey, a palette with a transparent entry, 1-bit,
  // and 16-bit grey (its high byte, the documented rule).
  for (const char* name : {"rgb.png", "rgba.png", "gray.png", "la.png", "palette.png", "bit1.png",
                           "big.png", "gray16.png"}) {
    SCOPED_TRACE(name);
    const RgbImage image = decode_file(ref.path(name));
    EXPECT_EQ(image.width, ref.size(name).first);
    EXPECT_EQ(image.height, ref.size(name).second);
    EXPECT_EQ(rgb_of(image), ref.pixels(name));
  }
}

TEST(ImageCodec, JpegDecodesToPilsPixels) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  // 4:2:0 and 4:4:4 chroma, grey (replicated), CMYK (PIL's conversion), progressive.
  for (const char* name :
       {"rgb.jpg", "rgb444.jpg", "gray.jpg", "cmyk.jpg", "progressive.jpg", "big.jpg"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = read_bytes(ref.path(name));
    JpegDecoder jpeg;
    EXPECT_EQ(jpeg.size(bytes.data(), bytes.size(), name), ref.size(name));
    const RgbImage image = decode_file(ref.path(name));
    EXPECT_EQ(image.width, ref.size(name).first);
    EXPECT_EQ(image.height, ref.size(name).second);
    EXPECT_LE(max_difference(rgb_of(image), ref.pixels(name)), 1);
  }
}

TEST(ImageCodec, ScaledJpegDecodeIsLibjpegsScaling) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  const std::string big = ref.path("big.jpg");  // 403 x 301
  const auto pil = ref.run({"draft " + big + " 2", "draft " + big + " 4", "draft " + big + " 8"});
  int k = 0;
  for (int denom : {2, 4, 8}) {
    SCOPED_TRACE(denom);
    const RgbImage image = decode_file(big, JpegScale{1, denom});
    EXPECT_EQ(image.width, (403 + denom - 1) / denom);  // TJSCALED: ceil
    EXPECT_EQ(image.height, (301 + denom - 1) / denom);
    EXPECT_LE(max_difference(rgb_of(image), pil[static_cast<size_t>(k++)]), 1);
  }
}

TEST(ImageCodec, ScaleIsTheSmallestPowerOfTwoThatCoversTheOutput) {
  JpegDecoder jpeg;
  auto expect = [&](double need_w, double need_h, int64_t out_w, int64_t out_h, int num,
                    int denom) {
    const JpegScale s = jpeg.scale_for(need_w, need_h, out_w, out_h);
    EXPECT_EQ(s.num * denom, num * s.denom)
        << need_w << "x" << need_h << " -> " << out_w << "x" << out_h;
  };
  expect(403, 301, 224, 224, 1, 1);    // 224 / 301 = 0.744 > 1/2: full size
  expect(1000, 900, 224, 224, 1, 4);   // 224 / 900 = 0.249 <= 1/4
  expect(1792, 1792, 224, 224, 1, 8);  // 1792 / 8 = 224 exactly
  expect(1791, 1792, 224, 224, 1, 4);  // 1791 / 8 = 223.9 < 224
  expect(100, 300, 224, 224, 1, 1);    // smaller than the output: no scale above 1
  expect(340, 2000, 160, 100, 1, 2);   // the width decides: 340 / 2 = 170 >= 160, / 4 = 85
}

TEST(ImageCodec, TheContentNotTheNamePicksTheDecoder) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  TempDir dir;
  const std::string fake = dir.file("really_a_png.jpg");
  write_bytes(fake, read_bytes(ref.path("rgb.png")));
  const auto bytes = read_bytes(fake);
  EXPECT_EQ(sniff_image(bytes.data(), bytes.size(), fake), ImageFormat::kPng);
  EXPECT_EQ(rgb_of(decode_file(fake)), ref.pixels("rgb.png"));
}

TEST(ImageCodec, DamagedFilesAreErrorsNamingTheFile) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  TempDir dir;
  auto expect_error = [&](const std::string& name, const std::vector<uint8_t>& bytes,
                          const std::string& says) {
    SCOPED_TRACE(name);
    const std::string path = dir.file(name);
    write_bytes(path, bytes);
    const std::string m = message_of([&] { decode_file(path); });
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(says), std::string::npos) << m;
  };
  std::vector<uint8_t> jpeg = read_bytes(ref.path("big.jpg"));
  std::vector<uint8_t> png = read_bytes(ref.path("rgb.png"));
  // A JPEG cut in the middle of its entropy-coded data decodes only with libjpeg's warning.
  expect_error(
      "cut.jpg",
      std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() / 2)),
      "libjpeg-turbo");
  // The start of a JPEG and nothing after it.
  expect_error("header_only.jpg", {0xff, 0xd8, 0xff, 0xe0, 0, 16}, "not a readable JPEG");
  expect_error(
      "cut.png",
      std::vector<uint8_t>(png.begin(), png.begin() + static_cast<long>(png.size() * 2 / 3)),
      "truncated");
  // One flipped byte inside the image data (IDAT): its CRC no longer matches.
  std::vector<uint8_t> flipped = png;
  flipped[png.size() / 2] ^= 0x55;
  expect_error("flipped.png", flipped, "libpng");
  expect_error("text.jpg", {'h', 'e', 'l', 'l', 'o'},
               "neither a JPEG nor a PNG (5 bytes, starting with 68 65 6c 6c 6f)");
}

}  // namespace
