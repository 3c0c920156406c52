// RandomErasing (data/images/auto_augment.h's random_erasing, augment_ops.h's erase_boxes_):
// the erase against torchvision's F.erase on the same boxes, bit for bit (augment_reference.py in
// DTRAIN_REF_PYTHON), and the draws against RandomErasing's constraints on scale and ratio.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <string>
#include <vector>

#include "data/images/augment_ops.h"
#include "data/images/auto_augment.h"
#include "image_reference.h"
#include "test_support.h"

namespace dtrain::detail {
namespace {

TEST(RandomErasing, EqualsTorchvisionsErase) {
  const int64_t n = 10, c = 3, h = 9, w = 7;
  at::Tensor images = at::randn({n, c, h, w}, at::TensorOptions().dtype(at::kFloat));
  std::vector<CropBox> boxes = {{0, 0, 0, 0}, {2, 1, 3, 4}, {0, 0, 9, 7},
                                {8, 6, 1, 1}, {5, 2, 0, 3}, {3, 3, 6, 4}};
  for (int64_t i = static_cast<int64_t>(boxes.size()); i < n; ++i) {
    SampleRandom r(4, 0, i);
    boxes.push_back(random_erasing(1.0, h, w, r));
  }
  at::Tensor rows = at::empty({n, 4}, at::kLong);
  test::TempDir dir;
  std::ofstream f(dir.file("boxes"));
  for (int64_t i = 0; i < n; ++i) {
    const CropBox& b = boxes[static_cast<size_t>(i)];
    const int64_t v[4] = {b.top, b.left, b.height, b.width};
    for (int k = 0; k < 4; ++k) rows[i][k] = v[k];
    f << v[0] << " " << v[1] << " " << v[2] << " " << v[3] << "\n";
  }
  f.close();
  const auto* bytes = reinterpret_cast<const uint8_t*>(images.data_ptr<float>());
  test::write_bytes(dir.file("images"), std::vector<uint8_t>(bytes, bytes + images.numel() * 4));
  augment_python(dir, "erase '" + dir.file("images") + "' " + std::to_string(n) + " " +
                          std::to_string(c) + " " + std::to_string(h) + " " + std::to_string(w) +
                          " '" + dir.file("boxes") + "' '" + dir.file("out") + "'");
  std::vector<uint8_t> out = test::read_bytes(dir.file("out"));
  ASSERT_EQ(static_cast<int64_t>(out.size()), images.numel() * 4);
  const at::Tensor theirs = at::from_blob(out.data(), images.sizes(), at::kFloat).clone();
  erase_boxes_(images, rows);
  for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(images[i].equal(theirs[i])) << "image " << i;
  EXPECT_GT(images.eq(0).sum().item<int64_t>(), 0);
  at::Tensor wrong = rows.to(at::kInt);
  EXPECT_THROW(erase_boxes_(images, wrong), Error);
}

TEST(RandomErasing, DrawsKeepTorchvisionsConstraints) {
  struct Size {
    int64_t h, w;
  };
  for (const Size s : {Size{32, 32}, Size{224, 224}, Size{3, 200}, Size{40, 7}, Size{1, 10}}) {
    SCOPED_TRACE(std::to_string(s.h) + "x" + std::to_string(s.w));
    const double area = static_cast<double>(s.h * s.w);
    int erased = 0;
    const int draws = 10000;
    for (int i = 0; i < draws; ++i) {
      SampleRandom r(6, s.h, i);
      const CropBox b = random_erasing(0.5, s.h, s.w, r);
      if (b.height == 0 && b.width == 0 && b.top == 0 && b.left == 0) continue;
      ++erased;
      ASSERT_TRUE(b.height >= 0 && b.width >= 0 && b.height < s.h && b.width < s.w);
      ASSERT_TRUE(b.top >= 0 && b.left >= 0 && b.top + b.height <= s.h && b.left + b.width <= s.w);
      // h = round(sqrt(a r)), w = round(sqrt(a / r)): h w and h / w within a rounding of scale and
      // ratio
      const double hh = static_cast<double>(b.height), ww = static_cast<double>(b.width);
      EXPECT_GE((hh + 0.5) * (ww + 0.5), 0.02 * area);
      EXPECT_LE((hh - 0.5) * (ww - 0.5), 0.33 * area);
      if (ww > 0.5) {
        EXPECT_LE((hh - 0.5) / (ww + 0.5), 3.3);
        EXPECT_GE((hh + 0.5) / (ww - 0.5), 0.3);
      }
    }
    if (s.h >= 32) {
      EXPECT_NEAR(erased, draws / 2, 250);  // square images: no fall-backs to speak of
    } else if (s.h == 3) {
      EXPECT_LT(erased, draws / 2 - 500);  // most draws of a 3-row image fall back
    }
  }
  SampleRandom r(6, 0, 0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(random_erasing(0.0, 32, 32, r).height, 0);
}

}  // namespace
}  // namespace dtrain::detail
