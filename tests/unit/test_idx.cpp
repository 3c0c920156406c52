// IDX reader: exact round trips of files written here (plain and gzip), every rejected layout,
// and the real Fashion-MNIST files from Debian's dataset-fashion-mnist.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dtrain/data/idx.h"
#include "test_support.h"

namespace {

using dtrain::test::is_directory;
using dtrain::test::message_of;
using dtrain::test::TempDir;
using dtrain::test::write_gzip;

void put_be32(std::vector<unsigned char>* out, uint32_t v) {
  out->push_back(static_cast<unsigned char>(v >> 24));
  out->push_back(static_cast<unsigned char>(v >> 16));
  out->push_back(static_cast<unsigned char>(v >> 8));
  out->push_back(static_cast<unsigned char>(v));
}

// IDX bytes: magic 0 0 type ndims, big-endian dims, then `payload` (already big-endian).
std::vector<unsigned char> idx_bytes(unsigned char type, const std::vector<uint32_t>& dims,
                                     const std::vector<unsigned char>& payload) {
  std::vector<unsigned char> out = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) put_be32(&out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_plain(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::vector<unsigned char> be32_payload(const std::vector<uint32_t>& words) {
  std::vector<unsigned char> out;
  for (uint32_t w : words) put_be32(&out, w);
  return out;
}

uint32_t float_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<unsigned char> uint8_images(int n, int h, int w) {
  std::vector<unsigned char> px;
  for (int i = 0; i < n * h * w; ++i) px.push_back(static_cast<unsigned char>((i * 37) % 256));
  return idx_bytes(0x08, {uint32_t(n), uint32_t(h), uint32_t(w)}, px);
}

std::vector<unsigned char> uint8_labels(const std::vector<unsigned char>& labels) {
  return idx_bytes(0x08, {uint32_t(labels.size())}, labels);
}

TEST(Idx, Uint8PlainAndGzipReadExactly) {
  TempDir dir;
  const auto bytes = uint8_images(3, 2, 4);
  write_plain(dir.file("img.idx"), bytes);
  write_gzip(dir.file("img.idx.gz"), bytes);
  // A gzip file is recognised by its magic bytes, not its name.
  write_gzip(dir.file("gzip-without-suffix"), bytes);
  for (const char* name : {"img.idx", "img.idx.gz", "gzip-without-suffix"}) {
    SCOPED_TRACE(name);
    at::Tensor t = dtrain::read_idx(dir.file(name));
    EXPECT_EQ(t.scalar_type(), at::kByte);
    EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{3, 2, 4}));
    const uint8_t* p = t.data_ptr<uint8_t>();
    for (int i = 0; i < 24; ++i) EXPECT_EQ(p[i], (i * 37) % 256) << "element " << i;
  }
}

TEST(Idx, MultiByteTypesAreBigEndian) {
  TempDir dir;
  // int32 (2, 3)
  const std::vector<int32_t> ints = {1, -2, 70000, -70000, 0x01020304, 2147483647};
  std::vector<uint32_t> words;
  for (int32_t v : ints) words.push_back(static_cast<uint32_t>(v));
  write_gzip(dir.file("i32.gz"), idx_bytes(0x0C, {2, 3}, be32_payload(words)));
  at::Tensor ti = dtrain::read_idx(dir.file("i32.gz"));
  EXPECT_EQ(ti.scalar_type(), at::kInt);
  EXPECT_EQ(ti.sizes().vec(), (std::vector<int64_t>{2, 3}));
  for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(ti.data_ptr<int32_t>()[i], ints[i]);

  // float32 (4,)
  const std::vector<float> floats = {0.5f, -1.25f, 3.0e10f, 1.0f / 3.0f};
  words.clear();
  for (float f : floats) words.push_back(float_bits(f));
  write_plain(dir.file("f32"), idx_bytes(0x0D, {4}, be32_payload(words)));
  at::Tensor tf = dtrain::read_idx(dir.file("f32"));
  EXPECT_EQ(tf.scalar_type(), at::kFloat);
  EXPECT_EQ(tf.sizes().vec(), (std::vector<int64_t>{4}));
  for (size_t i = 0; i < floats.size(); ++i) EXPECT_EQ(tf.data_ptr<float>()[i], floats[i]);

  // int16 (1, 1, 1, 2): four dimensions
  write_plain(dir.file("i16"), idx_bytes(0x0B, {1, 1, 1, 2}, {0x12, 0x34, 0xFF, 0xFE}));
  at::Tensor ts = dtrain::read_idx(dir.file("i16"));
  EXPECT_EQ(ts.scalar_type(), at::kShort);
  EXPECT_EQ(ts.sizes().vec(), (std::vector<int64_t>{1, 1, 1, 2}));
  EXPECT_EQ(ts.data_ptr<int16_t>()[0], 0x1234);
  EXPECT_EQ(ts.data_ptr<int16_t>()[1], -2);

  // float64 (1,)
  const double d = -2.5e-300;
  uint64_t bits = 0;
  std::memcpy(&bits, &d, 8);
  std::vector<unsigned char> payload;
  for (int s = 56; s >= 0; s -= 8) payload.push_back(static_cast<unsigned char>(bits >> s));
  write_gzip(dir.file("f64"), idx_bytes(0x0E, {1}, payload));
  at::Tensor td = dtrain::read_idx(dir.file("f64"));
  EXPECT_EQ(td.scalar_type(), at::kDouble);
  EXPECT_EQ(td.data_ptr<double>()[0], d);
}

TEST(Idx, MissingFileNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("does-not-exist.idx");
  const std::string msg = message_of([&] { dtrain::read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Idx, BadMagicIsRejected) {
  TempDir dir;
  auto bytes = uint8_images(1, 2, 2);
  bytes[0] = 0x12;
  write_plain(dir.file("bad"), bytes);
  const std::string msg = message_of([&] { dtrain::read_idx(dir.file("bad")); });
  EXPECT_NE(msg.find(dir.file("bad")), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;

  write_plain(dir.file("type"), idx_bytes(0x07, {1}, {0}));
  const std::string msg_type = message_of([&] { dtrain::read_idx(dir.file("type")); });
  EXPECT_NE(msg_type.find("element type"), std::string::npos) << msg_type;

  write_plain(dir.file("dims0"), idx_bytes(0x08, {}, {}));
  const std::string msg_dims = message_of([&] { dtrain::read_idx(dir.file("dims0")); });
  EXPECT_NE(msg_dims.find("dimensions"), std::string::npos) << msg_dims;

  write_plain(dir.file("dims5"), idx_bytes(0x08, {1, 1, 1, 1, 1}, {7}));
  const std::string msg_dims5 = message_of([&] { dtrain::read_idx(dir.file("dims5")); });
  EXPECT_NE(msg_dims5.find("5 dimensions"), std::string::npos) << msg_dims5;
}

TEST(Idx, TruncatedAndOverlongDataNameExpectedAndActualBytes) {
  TempDir dir;
  auto bytes = uint8_images(2, 3, 3);  // 16 header + 18 data = 34 bytes
  ASSERT_EQ(bytes.size(), 34u);
  auto truncated = bytes;
  truncated.resize(30);
  write_plain(dir.file("short"), truncated);
  write_gzip(dir.file("short.gz"), truncated);
  for (const char* name : {"short", "short.gz"}) {
    const std::string msg = message_of([&] { dtrain::read_idx(dir.file(name)); });
    EXPECT_NE(msg.find(dir.file(name)), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("34"), std::string::npos) << "expected size missing: " << msg;
    EXPECT_NE(msg.find("30"), std::string::npos) << "actual size missing: " << msg;
  }

  auto longer = bytes;
  longer.push_back(1);
  longer.push_back(2);
  write_plain(dir.file("long"), longer);
  const std::string msg = message_of([&] { dtrain::read_idx(dir.file("long")); });
  EXPECT_NE(msg.find("extra bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("34"), std::string::npos) << msg;
  EXPECT_NE(msg.find("36"), std::string::npos) << msg;

  // A header cut inside the dimensions.
  write_plain(dir.file("header"), std::vector<unsigned char>(bytes.begin(), bytes.begin() + 9));
  const std::string msg_header = message_of([&] { dtrain::read_idx(dir.file("header")); });
  EXPECT_NE(msg_header.find("truncated"), std::string::npos) << msg_header;

  // A gzip stream whose compressed bytes stop early.
  write_gzip(dir.file("cut.gz"), uint8_images(50, 28, 28));
  std::vector<unsigned char> gz;
  {
    std::ifstream f(dir.file("cut.gz"), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(f), {});
  }
  gz.resize(gz.size() / 2);
  write_plain(dir.file("cut.gz"), gz);
  const std::string msg_gz = message_of([&] { dtrain::read_idx(dir.file("cut.gz")); });
  EXPECT_NE(msg_gz.find(dir.file("cut.gz")), std::string::npos) << msg_gz;
  EXPECT_EQ(msg_gz.find("NOT A dtrain::Error"), std::string::npos) << msg_gz;
  EXPECT_NE(msg_gz.find("gzip"), std::string::npos) << msg_gz;
  EXPECT_EQ(msg_gz.find("NO EXCEPTION"), std::string::npos) << msg_gz;
}

TEST(Idx, ClassificationPairScalesAndChecksCounts) {
  TempDir dir;
  write_gzip(dir.file("img.gz"), uint8_images(3, 2, 2));
  write_gzip(dir.file("lab.gz"), uint8_labels({0, 9, 4}));
  auto ds = dtrain::load_idx_classification(dir.file("img.gz"), dir.file("lab.gz"), false);
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->inputs().sizes().vec(), (std::vector<int64_t>{3, 1, 2, 2}));
  EXPECT_EQ(ds->inputs().scalar_type(), at::kFloat);
  EXPECT_EQ(ds->targets().scalar_type(), at::kLong);
  EXPECT_EQ(ds->spec().input_shape, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(ds->spec().num_classes, 10);
  for (int i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(ds->inputs().flatten()[i].item<float>(), ((i * 37) % 256) / 255.0f);
  }
  EXPECT_EQ(ds->targets()[1].item<int64_t>(), 9);

  auto norm =
      dtrain::load_idx_classification(dir.file("img.gz"), dir.file("lab.gz"), true, 0.5, 0.25);
  EXPECT_NEAR(norm->inputs().flatten()[1].item<float>(), (37 / 255.0 - 0.5) / 0.25, 1e-5);

  // More than ten classes widens num_classes.
  write_gzip(dir.file("lab12.gz"), uint8_labels({0, 11, 4}));
  auto wide = dtrain::load_idx_classification(dir.file("img.gz"), dir.file("lab12.gz"), false);
  EXPECT_EQ(wide->spec().num_classes, 12);

  write_gzip(dir.file("lab2.gz"), uint8_labels({0, 1}));
  const std::string msg = message_of(
      [&] { dtrain::load_idx_classification(dir.file("img.gz"), dir.file("lab2.gz"), false); });
  EXPECT_NE(msg.find(dir.file("img.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("lab2.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 labels"), std::string::npos) << msg;
}

TEST(Idx, RealFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  ASSERT_TRUE(is_directory(dir))
      << dir << " is missing: install Debian's dataset-fashion-mnist package (the project's "
      << "setup script does: apt-get install dataset-fashion-mnist)";
  auto train = dtrain::load_idx_classification(dir + "/train-images-idx3-ubyte.gz",
                                               dir + "/train-labels-idx1-ubyte.gz", false);
  EXPECT_EQ(train->inputs().sizes().vec(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train->targets().min().item<int64_t>(), 0);
  EXPECT_EQ(train->targets().max().item<int64_t>(), 9);
  EXPECT_EQ(train->spec().num_classes, 10);
  // Fashion-MNIST is balanced: 6000 training images per class.
  at::Tensor counts = at::bincount(train->targets());
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c].item<int64_t>(), 6000) << "class " << c;
  auto test = dtrain::load_idx_classification(dir + "/t10k-images-idx3-ubyte.gz",
                                              dir + "/t10k-labels-idx1-ubyte.gz", false);
  EXPECT_EQ(test->inputs().sizes().vec(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_GE(test->targets().min().item<int64_t>(), 0);
  EXPECT_LE(test->targets().max().item<int64_t>(), 9);
  EXPECT_GE(train->inputs().min().item<float>(), 0.0f);
  EXPECT_LE(train->inputs().max().item<float>(), 1.0f);
}

}  // namespace
