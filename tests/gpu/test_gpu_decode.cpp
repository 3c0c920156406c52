// data.decode gpu (Note [GPU decoding]) against the CPU path, image by image, on JPEGs written
// here with libjpeg-turbo (4:2:0, 4:2:2, 4:4:4, grayscale; several sizes, both orientations):
// training crops and flips and evaluation crops within the stated bounds of the CPU path with
// data.scaled_decode false and true, also through the Loader's threads; decoding only the box a
// crop reads gives the whole image's bytes; a PNG and a progressive
// JPEG through the CPU and counted; a truncated JPEG an error naming it; the decoders' memory the
// same after five epochs as after one; the decode rate printed (GpuDecode.Throughput, which also
// times a folder of one's own: DTRAIN_DECODE_BENCH_DIR=<image folder>, its train/ split).
#include <turbojpeg.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <thread>

#include "cuda/device.h"
#include "cuda/jpeg_batch.h"
#include "cuda/jpeg_roi.h"
#include "cuda/resample_pixel.h"
#include "data/images/gpu_decode.h"
#include "data/splits.h"
#include "dtrain/data/loader.h"
#include "gpu_support.h"
#include "util/dir.h"
#include "util/fs.h"

namespace dtrain::test {
namespace {

// The bounds, in levels of 0..255 per channel: nvJPEG's IDCT and chroma upsampling are not
// libjpeg-turbo's. Against the CPU path at full size (data.scaled_decode false), and against its
// default scaled decoding (1/2 .. 1/8 in the DCT where the crop allows), per image. Set from
// nvJPEG 13.0 on an H100 (its hardware decoder), in two sessions alike: at full size at most 80
// levels (the saturated edges of 4:2:0 and 4:2:2 images) and 1.31 on average per image, against
// scaled decoding 80 and 2.40; the bounds leave a tenth more on the largest difference, and keep
// the mean under torchvision's bound for its GPU decoder (2) at full size, 3 against scaled
// decoding. The test prints what nvJPEG gives. A wrong crop, flip or tap shows as tens of levels
// on average.
constexpr double kFullMax = 88, kFullMean = 2.0;
constexpr double kScaledMax = 88, kScaledMean = 3.0;

// A photo-like picture: smooth gradients, saturated disks and bars with sharp edges (where
// chroma subsampling shows), a little noise.
std::vector<uint8_t> picture(int w, int h, uint32_t seed) {
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * 3);
  uint32_t r = seed * 2654435761u + 1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      r = r * 1664525u + 1013904223u;
      const int noise = static_cast<int>(r >> 28) - 8;
      int c[3] = {255 * x / w, 255 * y / h,
                  128 + static_cast<int>(100 * std::sin((x + y + seed) * 0.05))};
      const int dx = x - w / 3, dy = y - h / 2;
      if (dx * dx + dy * dy < (w / 5) * (w / 5)) c[0] = 230, c[1] = 20, c[2] = 40;
      if ((x / 17 + static_cast<int>(seed)) % 5 == 0 && y > h / 3) c[0] = 10, c[1] = 40, c[2] = 220;
      for (int k = 0; k < 3; ++k)
        p[(static_cast<size_t>(y) * w + x) * 3 + k] =
            static_cast<uint8_t>(std::clamp(c[k] + noise, 0, 255));
    }
  return p;
}

std::vector<uint8_t> jpeg_of(const std::vector<uint8_t>& rgb, int w, int h, int subsamp,
                             int flags) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, subsamp, 90, flags);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::vector<uint8_t> v(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return v;
}

// An RGB PNG: signature, IHDR, one zlib IDAT (filter 0 rows), IEND.
std::vector<uint8_t> png_of(const std::vector<uint8_t>& rgb, int w, int h) {
  std::vector<uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + static_cast<long>(y) * w * 3,
               rgb.begin() + static_cast<long>(y + 1) * w * 3);
  }
  uLongf zn = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(zn);
  compress(z.data(), &zn, raw.data(), static_cast<uLong>(raw.size()));
  z.resize(zn);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<uint8_t>(v >> s));
  };
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    be32(static_cast<uint32_t>(data.size()));
    const size_t start = png.size();
    png.insert(png.end(), type, type + 4);
    png.insert(png.end(), data.begin(), data.end());
    be32(
        static_cast<uint32_t>(crc32(0, png.data() + start, static_cast<uInt>(png.size() - start))));
  };
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {static_cast<uint32_t>(w), static_cast<uint32_t>(h)})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<uint8_t>(v >> s));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", {});
  return png;
}

struct Folder {
  std::string root;
  explicit Folder(const std::string& name) {
    char tmpl[] = "/tmp/dtrain-gpu-decode-XXXXXX";
    root = std::string(::mkdtemp(tmpl)) + "/" + name;
  }
  ~Folder() { detail::remove_tree(root.substr(0, root.rfind('/'))); }
  void put(const std::string& rel, const std::vector<uint8_t>& bytes) const {
    const std::string path = root + "/" + rel;
    detail::make_dirs(path.substr(0, path.rfind('/')));
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
  }
  std::string path(const std::string& rel) const { return root + "/" + rel; }
};

// The mixed folder: for each split, images of several sizes and samplings in two classes.
void fill(const Folder& f, const std::string& split, int count) {
  const int sizes[][2] = {{500, 375}, {375, 500}, {640, 427}, {220, 160}, {1024, 683}, {130, 300}};
  const int samplings[] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY};
  for (int i = 0; i < count; ++i) {
    const int w = sizes[i % 6][0], h = sizes[i % 6][1];
    f.put(split + "/c" + std::to_string(i % 2) + "/" + std::to_string(100 + i) + ".jpg",
          jpeg_of(picture(w, h, static_cast<uint32_t>(i)), w, h, samplings[i % 4], 0));
  }
}

// nvJPEG is loaded at run time: a GPU machine without libnvjpeg skips these, saying so.
#define SKIP_WITHOUT_NVJPEG()                                                    \
  do {                                                                           \
    const detail::NvjpegStatus nvjpeg = detail::nvjpeg_status();                 \
    if (!nvjpeg.usable) GTEST_SKIP() << "no GPU decoding here: " << nvjpeg.text; \
  } while (0)

// The folder's train/ split, and its val/ split as the test split where `with_val`.
DataConfig folder_config(const std::string& root, DecodeMode decode, bool scaled,
                         bool with_val = false) {
  DataConfig c;
  c.format = DataFormat::kImageFolder;
  c.path = root;
  c.test_dir = with_val ? "val" : "";
  c.image_size = 112;
  c.resize = 128;
  c.scaled_decode = scaled;
  c.decode = decode;
  return c;
}

std::vector<int64_t> all(const Dataset& d) {
  std::vector<int64_t> v(static_cast<size_t>(d.size()));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Image by image: the largest and the mean absolute difference, each within its bound.
void expect_close(const at::Tensor& gpu, const at::Tensor& cpu, double max_bound, double mean_bound,
                  const std::string& what) {
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  const at::Tensor d = (gpu.cpu().to(at::kInt) - cpu.to(at::kInt)).abs();
  double worst_max = 0, worst_mean = 0;
  for (int64_t k = 0; k < d.size(0); ++k) {
    const double mx = d[k].max().item<double>(), mean = d[k].to(at::kDouble).mean().item<double>();
    EXPECT_LE(mx, max_bound) << what << ": image " << k;
    EXPECT_LE(mean, mean_bound) << what << ": image " << k;
    worst_max = std::max(worst_max, mx), worst_mean = std::max(worst_mean, mean);
  }
  std::printf(
      "%s: %lld images, worst max |GPU - CPU| %.0f (bound %.0f), worst mean %.3f (bound %.2f)\n",
      what.c_str(), static_cast<long long>(d.size(0)), worst_max, max_bound, worst_mean,
      mean_bound);
}

TEST(GpuDecode, TrainingAndEvaluationMatchTheCpuPath) {
  SKIP_WITHOUT_NVJPEG();
  Folder f("mixed");
  fill(f, "train", 24);
  fill(f, "val", 12);
  const Splits gpu = make_datasets(folder_config(f.root, DecodeMode::kGpu, true, true), 5, kGpu);
  EXPECT_NE(gpu.train->describe().find("decoded on the GPU"), std::string::npos)
      << gpu.train->describe();
  // The log names nvJPEG's decoder: the hardware one on an A100, H100 or H200 (which have JPEG
  // engines), the CUDA one elsewhere.
  const std::string name = detail::device_name(0);
  const bool engines = name.find("A100") != std::string::npos ||
                       name.find("H100") != std::string::npos ||
                       name.find("H200") != std::string::npos;
  EXPECT_NE(gpu.train->describe().find(engines ? "its hardware decoder (the GPU's JPEG engines)"
                                               : "its CUDA decoder"),
            std::string::npos)
      << name << ": " << gpu.train->describe();
  std::printf("%s: %s\n", name.c_str(), gpu.train->describe().c_str());
  for (bool scaled : {false, true}) {
    const Splits cpu =
        make_datasets(folder_config(f.root, DecodeMode::kCpu, scaled, true), 5, kGpu);
    const double mx = scaled ? kScaledMax : kFullMax, mean = scaled ? kScaledMean : kFullMean;
    const std::string how = scaled ? " (CPU scaled_decode true)" : " (CPU scaled_decode false)";
    for (int64_t epoch : {0, 3}) {
      const Batch g = gpu.train->fetch(all(*gpu.train), epoch, false);
      EXPECT_TRUE(g.inputs.is_cuda());
      const Batch c = cpu.train->fetch(all(*cpu.train), epoch, false);
      EXPECT_TRUE(g.targets.equal(c.targets));
      expect_close(g.inputs, c.inputs, mx, mean, "training, epoch " + std::to_string(epoch) + how);
    }
    expect_close(gpu.test->get(all(*gpu.test)).inputs, cpu.test->get(all(*cpu.test)).inputs, mx,
                 mean, "evaluation" + how);
  }
  // Baseline JPEGs all: nvJPEG's, unless its hardware decoder refuses some (counted, not wrong).
  const detail::ImageDecodeCounts n = detail::image_decode_counts(*gpu.train);
  std::printf("training fetches: %lld images decoded on the GPU, %lld on the CPU\n",
              static_cast<long long>(n.gpu), static_cast<long long>(n.cpu));
  EXPECT_EQ(n.gpu + n.cpu, 4 * 24);
  EXPECT_GE(n.gpu, 3 * 24);
}

TEST(GpuDecode, LoaderThreadsDeliverTheSameBatches) {
  SKIP_WITHOUT_NVJPEG();
  Folder f("loader");
  fill(f, "train", 20);
  const Splits gpu = make_datasets(folder_config(f.root, DecodeMode::kGpu, false), 9, kGpu);
  std::vector<std::vector<int64_t>> plan = {
      {0, 1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12, 13}, {14, 15, 16, 17, 18, 19}};
  for (bool pin : {true, false}) {
    LoaderOptions o;
    o.workers = 2, o.prefetch = 2, o.pin_memory = pin, o.device = kGpu;
    Loader loader(gpu.train, plan, o, {1, 1, 1});
    for (const auto& indices : plan) {
      const auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_TRUE(b->inputs.is_cuda() && b->targets.is_cuda());
      EXPECT_TRUE(b->inputs.equal(gpu.train->fetch(indices, 1, false).inputs));
    }
  }
}

TEST(GpuDecode, PngAndProgressiveJpegGoThroughTheCpuAndAreCounted) {
  SKIP_WITHOUT_NVJPEG();
  Folder f("fallback");
  fill(f, "train", 3);
  const std::vector<uint8_t> rgb = picture(300, 200, 7);
  f.put("train/c0/z_png.png", png_of(rgb, 300, 200));
  f.put("train/c1/z_progressive.jpg", jpeg_of(rgb, 300, 200, TJSAMP_420, TJFLAG_PROGRESSIVE));
  const Splits gpu = make_datasets(folder_config(f.root, DecodeMode::kGpu, false), 3, kGpu);
  const Splits cpu = make_datasets(folder_config(f.root, DecodeMode::kCpu, false), 3, kGpu);
  const Batch g = gpu.train->fetch(all(*gpu.train), 2, false);
  const Batch c = cpu.train->fetch(all(*cpu.train), 2, false);
  const detail::ImageDecodeCounts n = detail::image_decode_counts(*gpu.train);
  EXPECT_EQ(n.gpu, 3);
  EXPECT_EQ(n.cpu, 2);
  expect_close(g.inputs, c.inputs, kFullMax, kFullMean, "with a PNG and a progressive JPEG");
  // The two the CPU decoded (samples 2 and 4: c0/z_png.png, c1/z_progressive.jpg) are the CPU
  // path's, exactly.
  EXPECT_TRUE(g.inputs[2].cpu().equal(c.inputs[2]));
  EXPECT_TRUE(g.inputs[4].cpu().equal(c.inputs[4]));
}

TEST(GpuDecode, DamagedJpegIsAnErrorNamingTheFile) {
  SKIP_WITHOUT_NVJPEG();
  Folder f("damaged");
  fill(f, "train", 3);
  std::vector<uint8_t> cut = jpeg_of(picture(400, 300, 1), 400, 300, TJSAMP_420, 0);
  cut.resize(cut.size() / 2);
  f.put("train/c0/cut.jpg", cut);
  const Splits gpu = make_datasets(folder_config(f.root, DecodeMode::kGpu, false), 3, kGpu);
  try {
    gpu.train->fetch(all(*gpu.train), 0, false);
    ADD_FAILURE() << "a truncated JPEG decoded without an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(f.path("train/c0/cut.jpg")), std::string::npos)
        << e.what();
  }
}

// Region decoding (src/cuda/jpeg_roi.h) against whole images, through one decoder: random crops
// and flips of JPEGs of every sampling and several sizes (odd ones too) give the same bytes from
// their boxes as from the whole images, and nvJPEG refuses none of either.
TEST(GpuDecode, BoxDecodesGiveTheWholeImagesBytes) {
  SKIP_WITHOUT_NVJPEG();
  detail::JpegBatchDecoder decoder(0);
  if (!decoder.roi())
    GTEST_SKIP() << "nvJPEG's " << decoder.backend() << " decoder decodes no regions here";
  const int64_t size = 112, n = 24;
  const int sizes[][2] = {{500, 375}, {375, 500}, {640, 427}, {221, 163}, {1024, 683}, {131, 301}};
  const int samplings[] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY};
  std::vector<std::vector<uint8_t>> files;
  files.reserve(static_cast<size_t>(n));  // the GpuJpegs point into them
  std::vector<detail::GpuJpeg> whole, boxed;
  std::vector<int32_t> taps;
  detail::ResampleTaps h_taps, v_taps;
  int boxes = 0;
  for (int i = 0; i < n; ++i) {
    const int w = sizes[i % 6][0], h = sizes[i % 6][1];
    files.push_back(jpeg_of(picture(w, h, static_cast<uint32_t>(i)), w, h, samplings[i % 4], 0));
    detail::SampleRandom random(7, 1, i);
    const detail::CropBox c =
        detail::random_resized_crop(w, h, {0.08, 1.0}, {0.75, 4.0 / 3}, random);
    const detail::ResamplePlan plan{
        c,
        {0, 0, static_cast<double>(c.width), static_cast<double>(c.height)},
        size,
        size,
        {0, 0, size, size},
        i % 2 == 1};
    detail::GpuJpeg g = detail::gpu_jpeg(w, h, plan, size, taps, h_taps, v_taps);
    g.data = files.back().data(), g.size = files.back().size(), g.slot = i;
    detail::set_planes(detail::jpeg_frame(g.data, g.size), g);
    whole.push_back(g);
    detail::jpeg_roi(g, taps.data() + g.taps, size);
    boxes += g.roi_width > 0 ? 1 : 0;
    boxed.push_back(g);
  }
  EXPECT_GE(boxes, n / 2) << "most random crops leave part of the image out";
  const auto decode = [&](const std::vector<detail::GpuJpeg>& jpegs, const char* what) {
    at::Tensor out = at::zeros({n, 3, size, size}, at::TensorOptions(at::kByte).device(at::kCUDA));
    const std::vector<size_t> refused =
        decoder.run(jpegs, taps, size, out.data_ptr<uint8_t>(), nullptr);
    EXPECT_TRUE(refused.empty()) << refused.size() << " images refused, decoded " << what;
    return out.cpu();
  };
  const at::Tensor from_boxes = decode(boxed, "from their boxes");
  const at::Tensor from_whole = decode(whole, "whole");
  for (int64_t k = 0; k < n; ++k)
    EXPECT_TRUE(at::equal(from_boxes[k], from_whole[k]))
        << "image " << k << ": box " << boxed[k].roi_x << "," << boxed[k].roi_y << " "
        << boxed[k].roi_width << "x" << boxed[k].roi_height << " of " << boxed[k].width << "x"
        << boxed[k].height << ", largest difference "
        << (from_boxes[k].to(at::kInt) - from_whole[k].to(at::kInt)).abs().max().item<int>();
  std::printf("box decodes: %d of %lld images in a box, their planes %.0f%% of the whole images'\n",
              boxes, static_cast<long long>(n), [&] {
                double part = 0, all = 0;
                for (int64_t k = 0; k < n; ++k)
                  part += static_cast<double>(cuda::jpeg_planes(boxed[k]).bytes),
                      all += static_cast<double>(cuda::jpeg_planes(whole[k]).bytes);
                return 100 * part / all;
              }());
}

TEST(GpuDecode, MemoryAfterFiveEpochsIsMemoryAfterOne) {
  SKIP_WITHOUT_NVJPEG();
  Folder f("memory");
  fill(f, "train", 30);
  const Splits gpu = make_datasets(folder_config(f.root, DecodeMode::kGpu, false), 4, kGpu);
  std::vector<std::vector<int64_t>> plan;
  for (int64_t i = 0; i < 30; i += 8) {
    plan.emplace_back();
    for (int64_t k = i; k < std::min<int64_t>(30, i + 8); ++k) plan.back().push_back((k * 7) % 30);
  }
  // One loader thread: one decoder, which sees every file in the first epoch.
  auto epoch = [&](int64_t e) {
    LoaderOptions o;
    o.workers = 1, o.prefetch = 2, o.device = kGpu;
    Loader loader(gpu.train, plan, o, std::vector<int64_t>(plan.size(), e));
    while (loader.next()) {
    }
  };
  epoch(0);
  const detail::DecodeMemory one = detail::decode_memory();
  const int64_t allocated = detail::memory_stats(kGpu).allocated;
  for (int64_t e = 1; e < 5; ++e) epoch(e);
  const detail::DecodeMemory five = detail::decode_memory();
  std::printf(
      "GPU decoders hold %.1f MiB of device memory and %.1f MiB of pinned memory; "
      "allocations: %lld device and %lld pinned in the first epoch, %lld and %lld in the "
      "next four\n",
      static_cast<double>(five.device) / (1 << 20), static_cast<double>(five.pinned) / (1 << 20),
      static_cast<long long>(one.device_allocations),
      static_cast<long long>(one.pinned_allocations),
      static_cast<long long>(five.device_allocations - one.device_allocations),
      static_cast<long long>(five.pinned_allocations - one.pinned_allocations));
  EXPECT_GT(one.device, 0);
  EXPECT_EQ(five.device, one.device);
  EXPECT_EQ(five.pinned, one.pinned);
  EXPECT_EQ(detail::memory_stats(kGpu).allocated, allocated);
}

// The pool lends at most its limit of decoders at once: the other threads wait their turn, and
// no more decoders are made than that.
TEST(GpuDecode, AtMostTheLimitOfDecodersAtOnce) {
  SKIP_WITHOUT_NVJPEG();
  EXPECT_EQ(detail::kGpuDecoders, 4);
  detail::GpuBatchPool pool(kGpu, 2);
  std::atomic<int> now{0}, most{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      const detail::GpuBatchPool::Lease lease = pool.take();
      const int n = ++now;
      int m = most.load();
      while (n > m && !most.compare_exchange_weak(m, n)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      --now;
      ++done;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(done.load(), 6);
  EXPECT_EQ(most.load(), 2);
  EXPECT_EQ(pool.made(), 2);
}

// Images per second decoding and transforming a training split, GPU (one thread, batches of
// 128) and CPU (one thread, scaled decoding as by default): the decode rate alone, no model.
TEST(GpuDecode, Throughput) {
  SKIP_WITHOUT_NVJPEG();
  const char* dir = std::getenv("DTRAIN_DECODE_BENCH_DIR");
  std::unique_ptr<Folder> own;
  std::string root = dir != nullptr ? dir : "";
  if (root.empty()) {
    own = std::make_unique<Folder>("throughput");
    fill(*own, "train", 192);
    root = own->root;
  }
  const int64_t size = 224;
  for (bool on_gpu : {true, false}) {
    DataConfig cfg = folder_config(root, on_gpu ? DecodeMode::kGpu : DecodeMode::kCpu, true);
    cfg.image_size = size, cfg.resize = 256;
    const auto train = make_datasets(cfg, 1, kGpu).train;
    const int64_t n = std::min<int64_t>(train->size(), on_gpu ? 2048 : 512);
    std::vector<int64_t> indices(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), 0);
    auto pass = [&](int64_t e) {
      for (int64_t i = 0; i < n; i += 128) {
        const std::vector<int64_t> b(indices.begin() + i,
                                     indices.begin() + std::min<int64_t>(n, i + 128));
        train->fetch(b, e, false);
      }
    };
    pass(0);  // warm: the decoder's buffers, the page cache
    const auto start = std::chrono::steady_clock::now();
    pass(1);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "decode + RandomResizedCrop(%lld) on the %s, one thread: %.0f images/s (%lld images of "
        "%s)\n",
        static_cast<long long>(size), on_gpu ? "GPU (nvJPEG)" : "CPU (libjpeg-turbo)",
        static_cast<double>(n) / s, static_cast<long long>(n), root.c_str());
  }
}

}  // namespace
}  // namespace dtrain::test
