// A damaged file is an error, never a hang (issue 29, point 8): seeded mutations of every data
// and config format dtrain reads, each read in a child process under a time and memory limit
// (fuzz_harness.h): IDX (plain and gzip), numeric CSV, token files with llm.c's header, JPEG and
// PNG (image_folder's decoders), YAML configs and preprocess.json (`dtrain predict`'s reader).
// Every case must return or end in a dtrain::Error.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "data/formats/csv_table.h"
#include "data/images/image_codec.h"
#include "data/preprocess.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/idx.h"
#include "dtrain/error.h"
#include "fuzz_harness.h"
#include "image_reference.h"
#include "test_paths.h"
#include "test_support.h"

namespace {

namespace d = dtrain::detail;
using dtrain::test::fuzz;
using dtrain::test::FuzzTally;
using dtrain::test::TempDir;

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The mutations must reach the reader: some cases end in an Error.
void expect_some_errors(const FuzzTally& t, const std::string& what) {
  EXPECT_GT(t.errors, 0) << what << ": no mutation was caught; the mutator does nothing?";
}

// An Error must carry a message that names `name` (the file).
void expect_named(const std::function<void()>& read, const std::string& name) {
  try {
    read();
  } catch (const dtrain::Error& e) {
    if (std::string(e.what()).find(name) == std::string::npos)
      throw std::runtime_error("an Error not naming " + name + ": " + e.what());
    throw;
  }
}

std::string big_endian32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// IDX bytes: magic 0 0 type ndims, big-endian dims, then the payload.
std::string idx_file_bytes(unsigned char type, const std::vector<uint32_t>& dims, size_t item) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t v : dims) s += big_endian32(v), n *= v;
  for (size_t i = 0; i < n * item; ++i) s.push_back(static_cast<char>((i * 37 + 11) % 251));
  return s;
}

std::string gzip_of(const TempDir& dir, const std::string& bytes) {
  const std::string p = dir.file("seed.gz");
  dtrain::test::write_gzip(p, std::vector<unsigned char>(bytes.begin(), bytes.end()));
  return dtrain::test::read_text(p);
}

TEST(FuzzData, MutatedIdxFilesEndInAnErrorOrLoad) {
  TempDir dir;
  const std::string path = dir.file("images.idx");
  auto read = [&](const std::string& bytes) {
    write(path, bytes);
    expect_named([&] { (void)dtrain::read_idx(path).sum(); }, path);
  };
  const std::string images = idx_file_bytes(0x08, {6, 5, 4}, 1);
  const std::string floats = idx_file_bytes(0x0D, {3, 7}, 4);
  EXPECT_NO_THROW(read(images));
  expect_some_errors(fuzz("IDX uint8", 11, 300, images, 0, read), "IDX uint8");
  expect_some_errors(fuzz("IDX float32", 12, 200, floats, 0, read), "IDX float32");
  const std::string gz = gzip_of(dir, images);
  EXPECT_NO_THROW(read(gz));
  expect_some_errors(fuzz("IDX gzip", 13, 300, gz, 2, read), "IDX gzip");
}

TEST(FuzzData, MutatedCsvFilesEndInAnErrorOrLoad) {
  TempDir dir;
  const std::string path = dir.file("train.csv");
  std::string csv = "\xEF\xBB\xBFx1,x2,\"x,3\",label\r\n";
  for (int r = 0; r < 12; ++r)
    csv += std::to_string(r * 0.25 - 1) + ",-" + std::to_string(r) + "e-3,\"" +
           std::to_string(r * 7) + "\"," + std::to_string(r % 3) + "\r\n";
  csv += "\n";
  d::CsvColumns classes;
  classes.targets = {"label"};
  classes.class_ids = true;
  d::CsvColumns regression;
  regression.targets = {"x1", "label"};
  regression.features = {"x2"};
  for (const d::CsvColumns* cols : {&classes, &regression}) {
    auto read = [&](const std::string& bytes) {
      write(path, bytes);
      expect_named([&] { (void)d::read_csv({path}, *cols, "data.train_files"); }, path);
    };
    EXPECT_NO_THROW(read(csv));
    const std::string what = cols == &classes ? "CSV classes" : "CSV regression";
    expect_some_errors(fuzz(what, cols == &classes ? 21 : 22, 400, csv, 0, read), what);
  }
}

TEST(FuzzData, MutatedTokenFileHeadersEndInAnErrorOrLoad) {
  TempDir dir;
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kTokens;
  cfg.path = dir.path();
  cfg.seq_len = 8;
  cfg.num_classes = 97;
  cfg.train_files = "train.bin";
  cfg.test_files = "val.bin";
  // llm.c's shard: 256 int32 (magic 20240520, version 1, the token count), then uint16 tokens
  auto shard = [](int n) {
    std::vector<int32_t> head(256, 0);
    head[0] = 20240520, head[1] = 1, head[2] = n;
    std::string s(reinterpret_cast<const char*>(head.data()), head.size() * 4);
    for (int i = 0; i < n; ++i) {
      const uint16_t t = static_cast<uint16_t>((i * 7) % 97);
      s.append(reinterpret_cast<const char*>(&t), 2);
    }
    return s;
  };
  write(dir.file("val.bin"), shard(40));
  const std::string seed = shard(120);
  auto read = [&](const std::string& bytes) {
    write(dir.file("train.bin"), bytes);
    expect_named(
        [&] {
          const dtrain::Splits s = dtrain::make_datasets(cfg, 3);
          for (const auto& split : {s.train, s.test}) {
            std::vector<int64_t> all(static_cast<size_t>(split->size()));
            std::iota(all.begin(), all.end(), 0);
            if (!all.empty()) (void)split->get(all);
          }
        },
        "train.bin");
  };
  EXPECT_NO_THROW(read(seed));
  // the mutations kept to the header (1024 bytes), where the sizes are
  expect_some_errors(fuzz("token header", 31, 400, seed.substr(0, 1024), 0,
                          [&](const std::string& h) { read(h + seed.substr(1024)); }),
                     "token header");
  expect_some_errors(fuzz("token file", 32, 200, seed, 0, read), "token file");
}

// `png` with each whole chunk's CRC-32 (over its type and data) computed again.
std::string with_png_crcs(std::string png) {
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(png.data() + at);
    const uint64_t len = (uint64_t(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    if (len > png.size() - at - 12) break;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, p + 4, static_cast<uInt>(len + 4)));
    png.replace(at + 8 + len, 4, big_endian32(crc));
    at += 12 + len;
  }
  return png;
}

TEST(FuzzData, MutatedImagesEndInAnErrorOrDecode) {
  const auto& ref = dtrain::test::ImageReference::get();
  ASSERT_TRUE(ref.ok()) << ref.error();
  uint64_t rng = 41;
  for (const char* name : {"rgb.png", "palette.png", "la.png", "gray16.png", "rgb.jpg",
                           "progressive.jpg", "cmyk.jpg", "gray.jpg"}) {
    const std::vector<uint8_t> raw = dtrain::test::read_bytes(ref.path(name));
    const std::string seed(raw.begin(), raw.end());
    const std::string path = std::string("fuzz/") + name;
    auto read = [&](const std::string& bytes) {
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
      expect_named(
          [&] {
            d::RgbImage img;
            if (d::sniff_image(p, bytes.size(), path) == d::ImageFormat::kPng) {
              d::decode_png(p, bytes.size(), path, img);
              return;
            }
            d::JpegDecoder jpeg;
            const auto [w, h] = jpeg.size(p, bytes.size(), path);
            jpeg.decode(p, bytes.size(), path, d::JpegScale{}, img);
            const d::JpegScale half = jpeg.scale_for(w / 2.0, h / 2.0, 1, 1);
            jpeg.decode(p, bytes.size(), path, half, img);
          },
          path);
    };
    EXPECT_NO_THROW(read(seed)) << name;
    // the signature kept (8 bytes of PNG, 3 of JPEG), so that the decoders see the mutations
    const bool png = seed[0] == '\x89';
    expect_some_errors(fuzz(name, rng++, 150, seed, png ? 8 : 3, read), name);
    // a PNG's chunks with their CRCs made right again: the mutations reach the chunks' contents
    if (png)
      expect_some_errors(fuzz(std::string(name) + " (CRCs fixed)", rng++, 150, seed, 8,
                              [&](const std::string& b) { read(with_png_crcs(b)); }),
                         name);
  }
}

TEST(FuzzData, MutatedYamlConfigsEndInAnErrorOrParse) {
  const std::string seed = dtrain::test::read_text(std::string(dtrain::test::source_dir()) +
                                                   "/configs/fashion_mnist.yaml");
  ASSERT_GT(seed.size(), 200u);
  auto read = [&](const std::string& text) {
    expect_named([&] { (void)dtrain::Config::from_string(text, "fuzz.yaml"); }, "fuzz.yaml");
  };
  expect_some_errors(fuzz("YAML config", 51, 600, seed, 0, read), "YAML config");
}

TEST(FuzzData, MutatedPreprocessFilesEndInAnErrorOrRead) {
  const dtrain::DataSpec spec = dtrain::test::folder_spec();
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kImageFolder;
  auto read = [&](const std::string& text) {
    expect_named([&] { (void)d::read_preprocess(text, "runs/x/preprocess.json"); },
                 "runs/x/preprocess.json");
  };
  expect_some_errors(fuzz("preprocess.json", 61, 400, d::preprocess_json(spec, cfg), 0, read),
                     "preprocess.json");
}

}  // namespace
