// `dtrain predict`'s pictures for runs trained on images of one size (data/formats/inputs.h,
// picture_inputs, idx_inputs): PIL computes the expected pixels (tests/unit/image_reference.py,
// Debian's python3-pil): for an idx run Image.open(f).convert("L").resize((W, H), BILINEAR),
// then x / 255 standardized by the formula (in float32: equal); for a cifar run
// convert("RGB").resize((W, H), BILINEAR) as uint8 planes. The file's first bytes, not its name,
// tell a picture from an IDX file; an IDX file still reads as before, and gives the inputs its
// pixels give as a PNG; a file that is neither says what predict reads.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "data/formats/inputs.h"
#include "dtrain/data/dataset.h"
#include "image_reference.h"
#include "test_support.h"

namespace {

using dtrain::DataSpec;
using dtrain::detail::idx_inputs;
using dtrain::detail::picture_inputs;
using dtrain::test::ImageReference;
using dtrain::test::message_of;
using dtrain::test::read_bytes;
using dtrain::test::TempDir;
using dtrain::test::write_bytes;

// Every picture of the reference set but gray16.png (PIL clips 16-bit gray where dtrain keeps the
// high byte, image_codec.h): PNGs of every color type, JPEGs baseline, 4:4:4, gray, CMYK and
// progressive, and two larger than the inputs.
const std::vector<std::string> kPictures = {
    "rgb.png", "rgba.png",   "gray.png", "la.png",   "palette.png", "bit1.png",       "big.png",
    "rgb.jpg", "rgb444.jpg", "gray.jpg", "cmyk.jpg", "big.jpg",     "progressive.jpg"};

// An idx run's spec: 1 x H x W gray, standardized with mean and std (Fashion-MNIST's).
DataSpec idx_spec(int64_t h, int64_t w) {
  DataSpec s;
  s.input_shape = {1, h, w};
  s.num_classes = 10;
  s.recipe.mean = {0.2860405969887955};
  s.recipe.std = {0.35302424451492237};
  return s;
}

// The first sample of `path` as the run's model sees it; a picture's name is its path, an IDX
// image's "path[0]".
at::Tensor first_input(const std::string& path, const DataSpec& spec, bool idx_file = false) {
  const auto in = idx_inputs(path, spec);
  EXPECT_EQ(in.names, std::vector<std::string>{idx_file ? path + "[0]" : path});
  return in.data->get({0}).inputs;
}

// The IDX bytes of n uint8 images of h x w.
std::vector<uint8_t> idx_file(const std::vector<uint8_t>& pixels, uint32_t n, uint32_t h,
                              uint32_t w) {
  std::vector<uint8_t> out = {0, 0, 0x08, 3};
  for (uint32_t d : {n, h, w})
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

TEST(Pictures, AnIdxRunsPicturesArePilsGrayResizeThenTheRunsStandardization) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  // 28 x 28 (Fashion-MNIST's), and H != W to hold the axes apart: PIL's size is (W, H).
  for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{28, 28}, {20, 36}}) {
    std::vector<std::string> jobs;
    for (const auto& name : kPictures)
      jobs.push_back("gray " + ref.path(name) + " " + std::to_string(w) + " " + std::to_string(h));
    const auto pil = ref.run(jobs);
    const DataSpec spec = idx_spec(h, w);
    const float mean = static_cast<float>(spec.recipe.mean[0]),
                sd = static_cast<float>(spec.recipe.std[0]);
    for (size_t k = 0; k < kPictures.size(); ++k) {
      const at::Tensor x = first_input(ref.path(kPictures[k]), spec);
      ASSERT_EQ(x.sizes().vec(), (std::vector<int64_t>{1, 1, h, w})) << kPictures[k];
      ASSERT_EQ(x.scalar_type(), at::kFloat);
      ASSERT_EQ(pil[k].size(), static_cast<size_t>(h * w)) << kPictures[k];
      const float* got = x.data_ptr<float>();
      int wrong = 0;
      for (int64_t i = 0; i < h * w; ++i) {
        const float want =
            (static_cast<float>(pil[k][static_cast<size_t>(i)]) / 255.0f - mean) / sd;
        if (got[i] != want) ++wrong;
      }
      EXPECT_EQ(wrong, 0) << kPictures[k] << " at " << w << " x " << h
                          << ": inputs that are not PIL's pixels "
                          << "standardized";
    }
  }
}

TEST(Pictures, ACifarRunsPicturesArePilsRgbResizeOfTheWholePicture) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  std::vector<std::string> jobs;
  for (const auto& name : kPictures) jobs.push_back("stretch " + ref.path(name) + " 32 32");
  const auto pil = ref.run(jobs);
  DataSpec spec;
  spec.input_shape = {3, 32, 32};
  spec.num_classes = 10;
  spec.pixel_mean = {0.49, 0.48, 0.45};
  spec.pixel_std = {0.25, 0.24, 0.26};
  for (size_t k = 0; k < kPictures.size(); ++k) {
    const auto in = picture_inputs(ref.path(kPictures[k]), spec);
    // uint8 pixels: the caller standardizes them on the device with the spec's mean and std.
    const at::Tensor x = in.data->get({0}).inputs;
    ASSERT_EQ(x.sizes().vec(), (std::vector<int64_t>{1, 3, 32, 32})) << kPictures[k];
    ASSERT_EQ(x.scalar_type(), at::kByte);
    EXPECT_EQ(in.data->spec().pixel_mean, spec.pixel_mean);
    const std::vector<uint8_t> got(x.data_ptr<uint8_t>(), x.data_ptr<uint8_t>() + x.numel());
    EXPECT_EQ(got, pil[k]) << kPictures[k] << ": not PIL's resize((32, 32)) of the RGB picture";
  }
}

TEST(Pictures, APngOfAnIdxImageGivesTheInputsOfTheIdxFile) {
  // gray.png (97 x 61) at its own size, and its pixels as an IDX file: the same floats.
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  const auto [w, h] = ref.size("gray.png");
  const std::vector<uint8_t> rgb = ref.pixels("gray.png");
  std::vector<uint8_t> gray;
  for (size_t i = 0; i < rgb.size(); i += 3) gray.push_back(rgb[i]);
  TempDir dir;
  write_bytes(dir.file("gray.idx"),
              idx_file(gray, 1, static_cast<uint32_t>(h), static_cast<uint32_t>(w)));
  const DataSpec spec = idx_spec(h, w);
  const at::Tensor from_idx = first_input(dir.file("gray.idx"), spec, /*idx_file=*/true);
  const at::Tensor from_png = first_input(ref.path("gray.png"), spec);
  EXPECT_TRUE(at::equal(from_idx, from_png));
  EXPECT_NE(idx_inputs(ref.path("gray.png"), spec)
                .data->describe()
                .find("made gray and resized to 97 x 61"),
            std::string::npos);
}

TEST(Pictures, TheFirstBytesNotTheNameTellAPictureFromAnIdxFile) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  TempDir dir;
  const std::vector<uint8_t> pixels = {0, 51, 102, 153, 204, 255};
  write_bytes(dir.file("images.png"), idx_file(pixels, 1, 2, 3));       // an IDX file named .png
  write_bytes(dir.file("photo.idx"), read_bytes(ref.path("rgb.jpg")));  // a JPEG named .idx
  const at::Tensor idx = first_input(dir.file("images.png"), idx_spec(2, 3), /*idx_file=*/true);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_NEAR(idx.flatten()[i].item<float>(),
                (pixels[static_cast<size_t>(i)] / 255.0 - 0.2860405969887955) / 0.35302424451492237,
                1e-6);
  EXPECT_EQ(first_input(dir.file("photo.idx"), idx_spec(28, 28)).sizes().vec(),
            (std::vector<int64_t>{1, 1, 28, 28}));
  // Neither: the IDX reader's error says what predict reads, naming the file.
  write_bytes(dir.file("anim.gif"), {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
  const std::string msg = message_of([&] { idx_inputs(dir.file("anim.gif"), idx_spec(28, 28)); });
  for (const std::string& part : std::vector<std::string>{
           dir.file("anim.gif"), "not an IDX file", "bad magic number 47 49 46 38",
           "IDX image files and PNG or JPEG pictures"})
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' in: " << msg;
}

TEST(Pictures, AFolderIsItsPicturesSortedByPathAndABrokenOneIsNamedWhenRead) {
  const auto& ref = ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("sub").c_str(), 0755), 0);
  write_bytes(dir.file("b.png"), read_bytes(ref.path("gray.png")));
  write_bytes(dir.file("sub/a.JPG"), read_bytes(ref.path("rgb.jpg")));
  write_bytes(dir.file("a.jpeg"), read_bytes(ref.path("gray.jpg")));
  write_bytes(dir.file("notes.txt"), {'h', 'i'});
  std::vector<uint8_t> cut = read_bytes(ref.path("rgb.png"));
  cut.resize(60);
  write_bytes(dir.file("c.png"), cut);
  const auto in = idx_inputs(dir.path(), idx_spec(28, 28));
  EXPECT_EQ(in.names, (std::vector<std::string>{dir.file("a.jpeg"), dir.file("b.png"),
                                                dir.file("c.png"), dir.file("sub/a.JPG")}));
  EXPECT_EQ(in.data->size(), 4);
  EXPECT_EQ(in.data->get({0, 1, 3}).inputs.sizes().vec(), (std::vector<int64_t>{3, 1, 28, 28}));
  const std::string msg = message_of([&] { in.data->get({2}); });
  EXPECT_NE(msg.find(dir.file("c.png")), std::string::npos) << msg;
  // A folder without a picture, and a run whose inputs are not images.
  TempDir empty;
  EXPECT_NE(message_of([&] {
              idx_inputs(empty.path(), idx_spec(28, 28));
            }).find("without a .jpg, .jpeg or .png"),
            std::string::npos);
  DataSpec rows;
  rows.input_shape = {4};
  rows.num_classes = 3;
  EXPECT_NE(message_of([&] { picture_inputs(dir.path(), rows); }).find("not that of images"),
            std::string::npos);
}

}  // namespace
