// data.decode (Note [GPU decoding]) where no GPU decodes: the key's choices, auto falling back to
// the CPU with its reason, gpu an error naming the key (on a CPU rank, and in a CPU build on any
// rank: the build answers that it has no nvJPEG), and the frame check that sends the JPEGs
// nvJPEG does not take to the CPU. The GPU itself: tests/gpu/test_gpu_decode.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/jpeg_batch.h"
#include "data/images/gpu_decode.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "image_reference.h"
#include "test_support.h"
#include "util/fs.h"

namespace {

using dtrain::DecodeMode;
using dtrain::detail::choose_decode;
using dtrain::detail::jpeg_refusal;
using dtrain::test::message_of;

const at::Device kCuda(at::kCUDA, 0);

TEST(DecodeChoice, TheKeyTakesCpuGpuAndAutoAndDefaultsToAuto) {
  EXPECT_EQ(dtrain::Config().data.decode, DecodeMode::kAuto);
  const std::string yaml = "data:\n  format: image_folder\n  path: /x\n";
  for (const auto& [name, mode] : std::vector<std::pair<std::string, DecodeMode>>{
           {"cpu", DecodeMode::kCpu}, {"gpu", DecodeMode::kGpu}, {"auto", DecodeMode::kAuto}}) {
    EXPECT_EQ(dtrain::Config::from_string(yaml, "t", {"data.decode=" + name}).data.decode, mode)
        << name;
    EXPECT_STREQ(dtrain::to_string(mode), name.c_str());
  }
  const std::string bad =
      message_of([&] { dtrain::Config::from_string(yaml, "t", {"data.decode=nvjpeg"}); });
  EXPECT_NE(bad.find("data.decode"), std::string::npos) << bad;
}

TEST(DecodeChoice, CpuIsTheCpuAndAutoOnACpuRankSaysWhy) {
  EXPECT_FALSE(choose_decode(DecodeMode::kCpu, kCuda, 2).gpu);
  const auto c = choose_decode(DecodeMode::kAuto, at::kCPU, 2);
  EXPECT_FALSE(c.gpu);
  EXPECT_NE(c.why.find("data.decode auto: the CPU, as this rank computes on cpu"),
            std::string::npos)
      << c.why;
  const std::string m = message_of([] { choose_decode(DecodeMode::kGpu, at::kCPU, 2); });
  EXPECT_NE(m.find("data.decode"), std::string::npos) << m;
  EXPECT_NE(m.find("needs a CUDA device"), std::string::npos) << m;
}

// auto on a CUDA rank where nvJPEG loads: the GPU while fewer than kCpuDecodeThreads loader
// threads can decode at once, the CPU from there on; gpu is the GPU whatever the threads.
TEST(DecodeChoice, AutoIsTheGpuForFewLoaderThreadsAndTheCpuForMany) {
  const dtrain::detail::NvjpegStatus nvjpeg{true, "nvJPEG 13.0.1"};
  ASSERT_EQ(dtrain::detail::kCpuDecodeThreads, 12);
  for (int threads : {1, 2, 3, 11}) {
    const auto c = choose_decode(DecodeMode::kAuto, kCuda, threads, nvjpeg);
    EXPECT_TRUE(c.gpu) << threads;
    EXPECT_EQ(c.why, "data.decode auto: the GPU, nvJPEG 13.0.1 on cuda:0, as only " +
                         std::to_string(threads) +
                         " loader thread(s) can decode at once (fewer than 12)");
  }
  for (int threads : {12, 15, 63}) {
    const auto c = choose_decode(DecodeMode::kAuto, kCuda, threads, nvjpeg);
    EXPECT_FALSE(c.gpu) << threads;
    EXPECT_EQ(c.why, "data.decode auto: the CPU, as " + std::to_string(threads) +
                         " loader thread(s) can decode at once (12 or more keep up with a fast "
                         "GPU, and the GPU's "
                         "decoder takes GPU time from training)");
  }
  EXPECT_TRUE(choose_decode(DecodeMode::kGpu, kCuda, 63, nvjpeg).gpu);
  EXPECT_FALSE(choose_decode(DecodeMode::kCpu, kCuda, 1, nvjpeg).gpu);
  EXPECT_FALSE(choose_decode(DecodeMode::kAuto, at::kCPU, 1, nvjpeg).gpu);
}

TEST(DecodeChoice, WithoutNvjpegAutoIsTheCpuAndGpuAnErrorNamingTheKey) {
  const dtrain::detail::NvjpegStatus nvjpeg = dtrain::detail::nvjpeg_status();
  if (nvjpeg.usable)
    GTEST_SKIP() << "nvJPEG is usable here (" << nvjpeg.text << "): the gpu tier tests it";
  if (!DTRAIN_WITH_CUDA) {
    EXPECT_NE(nvjpeg.text.find("CPU build"), std::string::npos) << nvjpeg.text;
  }
  const auto c = choose_decode(DecodeMode::kAuto, kCuda, 2);
  EXPECT_FALSE(c.gpu);
  EXPECT_NE(c.why.find("data.decode auto: the CPU, as " + nvjpeg.text), std::string::npos) << c.why;
  const std::string m = message_of([] { choose_decode(DecodeMode::kGpu, kCuda, 2); });
  EXPECT_NE(m.find("data.decode"), std::string::npos) << m;
  EXPECT_NE(m.find(nvjpeg.text), std::string::npos) << m;
  // The decoder itself answers alike.
  const std::string d = message_of([] { dtrain::detail::JpegBatchDecoder decoder(0); });
  EXPECT_NE(d.find("data.decode"), std::string::npos) << d;
  EXPECT_EQ(dtrain::detail::decode_memory().device, 0);
}

TEST(DecodeChoice, TheImageFolderSaysWhereItDecodes) {
  dtrain::test::TempDir dir;
  dtrain::detail::make_dirs(dir.file("train/a"));
  dtrain::test::write_bytes(dir.file("train/a/x.jpg"), {0xff, 0xd8, 0xff});  // scanned, not decoded
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kImageFolder;
  cfg.path = dir.path();
  cfg.test_dir = "";
  cfg.resize = 256;
  cfg.decode = DecodeMode::kAuto;
  const std::string d = dtrain::make_datasets(cfg, 0).train->describe();
  EXPECT_NE(d.find("decoded on the CPU (data.decode auto: the CPU, as this rank computes on cpu)"),
            std::string::npos)
      << d;
  cfg.decode = DecodeMode::kGpu;
  const std::string m = message_of([&] { dtrain::make_datasets(cfg, 0); });
  EXPECT_NE(m.find("data.decode"), std::string::npos) << m;
}

// A JPEG's markers up to its frame header, its first scan and its end: what jpeg_refusal reads.
// `sampling` holds each component's factors (0x22 for Y of 4:2:0), `ids` its ids; `app` a segment
// placed before the frame header.
std::vector<uint8_t> jpeg_bytes(uint8_t sof, uint8_t precision, uint8_t components, bool end = true,
                                std::vector<uint8_t> sampling = {}, std::vector<uint8_t> ids = {},
                                std::vector<uint8_t> app = {}) {
  std::vector<uint8_t> v = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 'J', 'F'};  // SOI, an APP0 segment
  for (uint8_t b : app) v.push_back(b);
  v.insert(v.end(), {0xff, sof, 0x00, static_cast<uint8_t>(8 + 3 * components), precision, 0x00,
                     0x10, 0x00, 0x10, components});
  for (uint8_t c = 0; c < components; ++c)
    v.insert(v.end(), {c < ids.size() ? ids[c] : static_cast<uint8_t>(c + 1),
                       c < sampling.size() ? sampling[c] : uint8_t{0x11}, 0x00});
  v.insert(v.end(), {0xff, 0xda, 0x00, 0x02, 0x12, 0x34, 0x56});
  if (end) v.insert(v.end(), {0xff, 0xd9, 0x00, 0x00});  // zero padding after the end is allowed
  return v;
}

std::string refusal(const std::vector<uint8_t>& v) { return jpeg_refusal(v.data(), v.size()); }

TEST(DecodeChoice, TheFrameCheckSendsWhatNvjpegDoesNotTakeToTheCpu) {
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3)), "");  // baseline
  EXPECT_EQ(refusal(jpeg_bytes(0xc1, 8, 1)), "");  // extended sequential, grayscale
  EXPECT_EQ(refusal(jpeg_bytes(0xc2, 8, 3)), "a progressive JPEG");
  EXPECT_EQ(refusal(jpeg_bytes(0xc9, 8, 3)),
            "a JPEG that is neither baseline nor sequential Huffman-coded");
  EXPECT_EQ(refusal(jpeg_bytes(0xc3, 8, 3)),
            "a JPEG that is neither baseline nor sequential Huffman-coded");
  EXPECT_EQ(refusal(jpeg_bytes(0xc1, 12, 3)), "a JPEG of 12-bit samples");
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 4)), "a JPEG of 4 components (CMYK)");
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, /*end=*/false)), "a JPEG without its end marker");
  std::vector<uint8_t> cut = jpeg_bytes(0xc0, 8, 3);
  cut.resize(9);
  EXPECT_EQ(refusal(cut), "a JPEG without a readable frame header");
  std::vector<uint8_t> broken = jpeg_bytes(0xc0, 8, 3);
  broken[8] = 0x12;  // where the frame header's FF should be
  EXPECT_EQ(refusal(broken), "a JPEG whose markers cannot be followed");
  // Chroma sampled at 1, 1/2 (4:2:2, 4:2:0, 4:4:0) or 1/4 (4:1:1) of the luma: the kernels' shifts.
  for (uint8_t y : {0x11, 0x21, 0x22, 0x12, 0x41})
    EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {y, 0x11, 0x11})), "");
  const std::string fractional = "a JPEG whose chroma is not sampled at 1, 1/2 or 1/4 of the luma";
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {0x31, 0x11, 0x11})), fractional);  // 1/3
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {0x11, 0x21, 0x11})),
            fractional);  // chroma above the luma
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {0x42, 0x21, 0x11})),
            "");  // Cb at 1/2, Cr at 1/4 x 1/2: shifts each
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {0x32, 0x11, 0x11})), fractional);  // 1/3 across
  // RGB rather than YCbCr, by libjpeg's rule: an Adobe marker's transform 0, or the ids R, G, B
  // without a JFIF or Adobe marker; a JFIF marker makes it YCbCr whatever the ids.
  const std::vector<uint8_t> adobe0 = {0xff, 0xee, 0x00, 0x0e, 'A', 'd', 'o', 'b',
                                       'e',  0,    100,  0,    0,   0,   0,   0};
  const std::vector<uint8_t> adobe1 = {0xff, 0xee, 0x00, 0x0e, 'A', 'd', 'o', 'b',
                                       'e',  0,    100,  0,    0,   0,   0,   1};
  const std::vector<uint8_t> jfif = {0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0,
                                     1,    1,    0,    0,    1,   0,   1,   0,   0};
  const std::string rgb = "a JPEG of RGB components (no YCbCr)";
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {}, {}, adobe0)), rgb);
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {}, {}, adobe1)), "");
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {}, {'R', 'G', 'B'})), rgb);
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {}, {'R', 'G', 'B'}, jfif)), "");
  EXPECT_EQ(refusal(jpeg_bytes(0xc0, 8, 3, true, {}, {'R', 'G', 'B'}, adobe1)), "");
}

TEST(DecodeChoice, TheFrameGivesThePlanesAndTheirShifts) {
  auto planes = [](const std::vector<uint8_t>& v) {
    dtrain::detail::GpuJpeg g;
    dtrain::detail::set_planes(dtrain::detail::jpeg_frame(v.data(), v.size()), g);
    return std::vector<int>{g.planes, g.shift_x[0], g.shift_y[0], g.shift_x[1], g.shift_y[1]};
  };
  EXPECT_EQ(planes(jpeg_bytes(0xc0, 8, 3)), (std::vector<int>{3, 0, 0, 0, 0}));  // 4:4:4
  EXPECT_EQ(planes(jpeg_bytes(0xc0, 8, 3, true, {0x22, 0x11, 0x11})),
            (std::vector<int>{3, 1, 1, 1, 1}));  // 4:2:0
  EXPECT_EQ(planes(jpeg_bytes(0xc0, 8, 3, true, {0x21, 0x11, 0x11})),
            (std::vector<int>{3, 1, 0, 1, 0}));  // 4:2:2
  EXPECT_EQ(planes(jpeg_bytes(0xc0, 8, 3, true, {0x41, 0x11, 0x11})),
            (std::vector<int>{3, 2, 0, 2, 0}));  // 4:1:1
  EXPECT_EQ(planes(jpeg_bytes(0xc0, 8, 3, true, {0x22, 0x21, 0x11})),
            (std::vector<int>{3, 0, 1, 1, 1}));  // Cb 4:2:2 of Y
  EXPECT_EQ(planes(jpeg_bytes(0xc1, 8, 1, true, {0x22})),
            (std::vector<int>{1, 0, 0, 0, 0}));  // grayscale
}

}  // namespace
