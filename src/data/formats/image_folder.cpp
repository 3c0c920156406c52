// data.format image_folder: JPEG and PNG files in one folder per class, decoded and transformed
// in the loader's threads into uint8 batches, or with data.decode gpu read there and decoded and
// transformed on the GPU (Note [GPU decoding], images/gpu_decode.h) with the same draws.
// Registered as data.format image_folder (Note [data formats]); `dtrain predict` reads image
// files for it, transformed as the evaluation images.
//
// Note [image transforms]: the folder is read as torchvision's ImageFolder reads it: under
// data.path/data.train_dir (and data.test_dir) every subfolder is a class, the classes sorted by
// name and numbered from 0; a class's images are the files below its folder (subfolders too,
// symbolic links followed) whose names end in .jpg, .jpeg or .png (any case), in sorted order.
// Other files are skipped, as torchvision skips files without an image extension, and counted in
// the description; unlike torchvision, dtrain reads no other image formats (BMP, TIFF, WebP).
// No class folder, or a class folder without an image, is an error naming the folder. The test
// folder's classes are looked up by name among the training classes (a class missing from the
// test folder shifts no label; one the training folder lacks is an error).
// Each sample is decoded (image_codec.h) and transformed (image_transforms.h) as torchvision's
// defaults on PIL images do, into data.image_size x data.image_size RGB pixels, uint8 (N, 3, S, S),
// standardized on the device (Note [uint8 pixels]) with data.pixel_mean / data.pixel_std
// (ImageNet's) when data.normalize, else only divided by 255:
//   training:   RandomResizedCrop(S, data.crop_scale, data.crop_ratio), then
//               RandomHorizontalFlip (data.hflip);
//   evaluation: Resize(data.resize: the shorter side) and CenterCrop(S).
// Resampling is PIL's antialiased bilinear filter, so a PNG gives PIL's pixels exactly, and so
// does a JPEG decoded at full size (data.scaled_decode: false) by the same libjpeg-turbo. With
// data.scaled_decode (the default) a JPEG is decoded at the smallest of 1/2, 1/4, 1/8 of its size
// that still holds the crop at S pixels or more (evaluation: the shorter side at data.resize or
// more), and the crop is mapped into the smaller image; the output then differs from PIL's by the
// DCT's own shrinking, a few levels per pixel, for a fraction of the work on large photos. A
// training crop and flip are drawn from (run.seed, epoch, sample index) (SampleRandom), so a run is
// reproducible on any number of ranks and after a resume; a sample that the sampler repeats within
// one epoch (padding to a multiple of the world size) gets the same crop twice.
#include <sys/stat.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "cuda/streams.h"
#include "data/files.h"
#include "data/formats/class_folders.h"
#include "data/formats/inputs.h"
#include "data/formats/registry.h"
#include "data/images/auto_augment.h"
#include "data/images/gpu_decode.h"
#include "data/images/image_codec.h"
#include "data/images/image_transforms.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "util/cpus.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

struct Transform {
  bool train = true;
  int64_t size = 224, resize = 256;
  std::vector<double> scale, ratio;
  bool hflip = true, scaled_decode = true;
  BatchAugment
      augment;  // training: data.auto_augment after the crop and flip, on the batch's device
};

// How one sample's pixels come out of its decoded image (Note [image transforms]): the scale it
// is decoded at, then the resampling of that decode (Resampler::run, or the GPU's gpu_jpeg).
struct Plan {
  JpegScale scale;
  ResamplePlan resample;
};

// What one loader thread needs to turn files into pixels; one per fetch() call.
struct Worker {
  JpegDecoder jpeg;
  Resampler resampler;
  RgbImage image;
  std::vector<uint8_t> bytes;
};

class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(Folder folder, Transform t, int64_t classes, std::vector<double> mean,
                     std::vector<double> std, uint64_t seed, const at::Device& device,
                     DecodeChoice decode)
      : folder_(std::move(folder)),
        t_(std::move(t)),
        classes_(classes),
        seed_(seed),
        device_(device),
        decode_(std::move(decode)) {
    spec_.input_shape = {3, t_.size, t_.size};
    spec_.num_classes = classes_;
    spec_.input_dtype = at::kFloat;
    spec_.pixel_mean = std::move(mean);
    spec_.pixel_std = std::move(std);
    spec_.recipe.class_names = folder_.classes;
    spec_.recipe.resize = t_.resize;
    const std::string how =
        t_.train ? format("random resized crops to %lld (scale [%g, %g], ratio [%g, %g])%s",
                          static_cast<long long>(t_.size), t_.scale[0], t_.scale[1], t_.ratio[0],
                          t_.ratio[1], t_.hflip ? ", flipped at random" : "") +
                       t_.augment.describe()
                 : format("resized to %lld, center crops of %lld",
                          static_cast<long long>(t_.resize), static_cast<long long>(t_.size));
    // The decoder a loader thread will use, made now (the pool keeps it for the first fetch), so
    // that the log says which of nvJPEG's decoders runs.
    std::string decoder;
    if (decode_.gpu) {
      pool_ = std::make_unique<GpuBatchPool>(device_);
      const GpuBatchPool::Lease first = pool_->take();
      decoder = std::string(", its ") + first->backend() + " decoder" +
                (std::string(first->backend()) == "hardware" ? " (the GPU's JPEG engines)" : "");
    }
    description_ =
        format("image folder %s: %zu images of %zu classes", folder_.root.c_str(),
               folder_.samples.size(), folder_.classes.size()) +
        (folder_.skipped > 0 ? " (" + other_files(folder_.skipped) + " skipped)" : std::string()) +
        ", " + how + "; decoded on the " + (decode_.gpu ? "GPU" : "CPU") + " (" + decode_.why +
        decoder + ")";
  }

  ~ImageFolderDataset() override {
    const int64_t cpu = cpu_decodes_.load();
    if (cpu > 0)
      log::every(
          format("%s: %lld of %lld images decoded on the CPU instead of the GPU (data.decode), "
                 "as nvJPEG does not take them",
                 folder_.root.c_str(), static_cast<long long>(cpu),
                 static_cast<long long>(cpu + gpu_decodes_.load())));
  }

  int64_t size() const override { return static_cast<int64_t>(folder_.samples.size()); }
  Batch get(const std::vector<int64_t>& indices) const override { return fetch(indices, 0, false); }
  Batch get_pinned(const std::vector<int64_t>& indices) const override {
    return fetch(indices, 0, true);
  }
  DataSpec spec() const override { return spec_; }
  std::string describe() const override { return description_; }
  ImageDecodeCounts decode_counts() const { return {gpu_decodes_.load(), cpu_decodes_.load()}; }

  Batch fetch(const std::vector<int64_t>& indices, int64_t epoch, bool pinned) const override {
    const auto n = static_cast<int64_t>(indices.size());
    const int64_t s = t_.size;
    // Targets stay on the host (pinned for the loader's copy); with data.decode gpu the inputs
    // come back on the device (Note [GPU decoding]).
    at::Tensor targets = at::empty({n}, at::TensorOptions().dtype(at::kLong).pinned_memory(pinned));
    int64_t* y = targets.data_ptr<int64_t>();
    for (int64_t k = 0; k < n; ++k) y[k] = sample(indices[static_cast<size_t>(k)]).label;
    if (decode_.gpu) {
      at::Tensor inputs = fetch_gpu(indices, epoch);
      if (t_.augment.active())
        run_on_loader_stream(device_, [&] { inputs = t_.augment(inputs, indices, epoch); });
      return Batch{inputs, targets};
    }
    at::Tensor inputs =
        at::empty({n, 3, s, s}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
    uint8_t* x = inputs.data_ptr<uint8_t>();
    Worker w;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = indices[static_cast<size_t>(k)];
      load(sample(i).path, i, epoch, w, x + k * 3 * s * s);
    }
    if (t_.augment.active()) inputs.copy_(t_.augment(inputs, indices, epoch));  // stays pinned
    return Batch{inputs, targets};
  }

 private:
  const Sample& sample(int64_t i) const {
    if (i < 0 || i >= size())
      throw Error("sample index " + std::to_string(i) + " is out of range [0, " +
                      std::to_string(size()) + ")",
                  description_);
    return folder_.samples[static_cast<size_t>(i)];
  }

  // The sample's crop and flip (drawn from (seed, epoch, index)) on a width x height image;
  // `decoder` picks the JPEG scale when one may be chosen (data.scaled_decode), else full size.
  Plan plan(int64_t width, int64_t height, int64_t index, int64_t epoch,
            const JpegDecoder* decoder) const {
    SampleRandom random(seed_, epoch, index);
    const int64_t s = t_.size;
    Plan p;
    ResamplePlan& r = p.resample;
    if (!t_.train) {
      const CenterCrop center = resize_center_crop(width, height, t_.resize, s);
      if (decoder != nullptr)
        p.scale = decoder->scale_for(static_cast<double>(width), static_cast<double>(height),
                                     center.resized_width, center.resized_height);
      const double f = static_cast<double>(p.scale.num) / p.scale.denom;
      r.region = CropBox{0, 0, p.scale.scaled(height), p.scale.scaled(width)};
      r.box = Box{0, 0, static_cast<double>(width) * f, static_cast<double>(height) * f};
      r.grid_width = center.resized_width, r.grid_height = center.resized_height;
      r.window = center.crop;
      return p;
    }
    const CropBox crop = random_resized_crop(width, height, t_.scale, t_.ratio, random);
    if (decoder != nullptr)
      p.scale = decoder->scale_for(static_cast<double>(crop.width),
                                   static_cast<double>(crop.height), s, s);
    // The crop in the decoded image's pixels: the smallest whole-pixel region around it (the
    // crop itself at full size), and the crop's exact place within that region.
    const double f = static_cast<double>(p.scale.num) / p.scale.denom;
    const double x0 = static_cast<double>(crop.left) * f,
                 x1 = static_cast<double>(crop.left + crop.width) * f;
    const double y0 = static_cast<double>(crop.top) * f,
                 y1 = static_cast<double>(crop.top + crop.height) * f;
    r.region.left = static_cast<int64_t>(std::floor(x0));
    r.region.top = static_cast<int64_t>(std::floor(y0));
    r.region.width = std::min<int64_t>(static_cast<int64_t>(std::ceil(x1)), p.scale.scaled(width)) -
                     r.region.left;
    r.region.height =
        std::min<int64_t>(static_cast<int64_t>(std::ceil(y1)), p.scale.scaled(height)) -
        r.region.top;
    const auto left = static_cast<double>(r.region.left), top = static_cast<double>(r.region.top);
    r.box = Box{x0 - left, y0 - top, x1 - left, y1 - top};
    r.grid_width = r.grid_height = s;
    r.window = CropBox{0, 0, s, s};
    r.flip = t_.hflip && random_flip(random);
    return p;
  }

  // One image into 3 planes of S x S on the CPU (Note [image transforms]).
  void load(const std::string& path, int64_t index, int64_t epoch, Worker& w, uint8_t* out) const {
    const size_t n = read_file_into(path, w.bytes);
    const uint8_t* data = w.bytes.data();
    const bool jpeg = sniff_image(data, n, path) == ImageFormat::kJpeg;
    int64_t width = 0, height = 0;
    if (jpeg) {
      std::tie(width, height) = w.jpeg.size(data, n, path);
    } else {
      decode_png(data, n, path, w.image);
      width = w.image.width, height = w.image.height;
    }
    const Plan p = plan(width, height, index, epoch, jpeg && t_.scaled_decode ? &w.jpeg : nullptr);
    if (jpeg) w.jpeg.decode(data, n, path, p.scale, w.image);
    const RgbView image{w.image.pixels.data(), w.image.width, w.image.height, w.image.width * 3};
    w.resampler.run(image, p.resample, out);
  }

  // The batch on the device (Note [GPU decoding]): the files read and planned here, the JPEGs
  // nvJPEG takes decoded and resampled on the GPU, the others through load().
  at::Tensor fetch_gpu(const std::vector<int64_t>& indices, int64_t epoch) const {
    const auto n = static_cast<int64_t>(indices.size());
    // The files first, into this thread's buffers, before it takes a decoder: the pool lends at
    // most kGpuDecoders at once, and reading stays parallel over every loader thread.
    thread_local std::vector<std::vector<uint8_t>> files;
    thread_local std::vector<size_t> sizes;
    if (files.size() < static_cast<size_t>(n)) files.resize(static_cast<size_t>(n));
    sizes.resize(static_cast<size_t>(n));
    for (size_t k = 0; k < static_cast<size_t>(n); ++k)
      sizes[k] = read_file_into(sample(indices[k]).path, files[k]);
    GpuBatchPool::Lease batch = pool_->take();
    batch->start(n, t_.size);
    Worker w;
    int64_t cpu = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = indices[static_cast<size_t>(k)];
      const std::string& path = sample(i).path;
      std::vector<uint8_t>& bytes = batch->bytes(k);
      bytes.swap(
          files[static_cast<size_t>(k)]);  // the batch's old buffer comes back for the next read
      const size_t size = sizes[static_cast<size_t>(k)];
      std::string why = "a PNG";
      if (sniff_image(bytes.data(), size, path) == ImageFormat::kJpeg) {
        const auto [width, height] = w.jpeg.size(bytes.data(), size, path);
        why = batch->refusal(k, size);
        if (why.empty()) {
          batch->add(k, size, width, height, plan(width, height, i, epoch, nullptr).resample);
          continue;
        }
      }
      first_refusal(why, path);
      load(path, i, epoch, w, batch->planes(k));
      ++cpu;
    }
    int64_t refused = 0;
    at::Tensor inputs = batch->finish(
        [&](int64_t k, uint8_t* planes) {
          const int64_t i = indices[static_cast<size_t>(k)];
          first_refusal("a JPEG nvJPEG's batched decode failed on", sample(i).path);
          load(sample(i).path, i, epoch, w, planes);
        },
        refused);
    cpu_decodes_ += cpu + refused;
    gpu_decodes_ += n - cpu - refused;
    return inputs;
  }

  // The log's line for the first file of each kind that goes to the CPU (the count comes at the
  // end).
  void first_refusal(const std::string& why, const std::string& path) const {
    std::lock_guard<std::mutex> lock(refusal_mu_);
    if (!refusals_.insert(why).second) return;
    log::every(path + ": " + why + ", decoded on the CPU (data.decode " +
               (decode_.gpu ? "gpu" : "cpu") +
               "; files like it are counted, the total logged at the end)");
  }

  Folder folder_;
  Transform t_;
  int64_t classes_;
  uint64_t seed_;
  at::Device device_;
  DecodeChoice decode_;
  std::unique_ptr<GpuBatchPool> pool_;
  mutable std::atomic<int64_t> gpu_decodes_{0}, cpu_decodes_{0};
  mutable std::mutex refusal_mu_;
  mutable std::set<std::string> refusals_;
  DataSpec spec_;
  std::string description_;
};

void check_settings(const DataConfig& cfg) {
  Config::check_value("data.image_size", static_cast<double>(cfg.image_size));
  if (cfg.resize == 0)
    throw Error("is 0: set it, or resolve the config so that it comes from data.image_size",
                "data.resize");
  if (cfg.resize < cfg.image_size)
    throw Error("is " + std::to_string(cfg.resize) + ", smaller than the crop, data.image_size " +
                    std::to_string(cfg.image_size) +
                    ": evaluation resizes the shorter side to data.resize, then crops",
                "data.resize");
  auto pair = [](const std::vector<double>& v, const char* key, double above, double at_most) {
    if (v.size() != 2 || !(v[0] > above && v[0] <= v[1] && v[1] <= at_most))
      throw Error(format("needs [low, high] with %g < low <= high <= %g, got %zu numbers", above,
                         at_most, v.size()),
                  key);
  };
  pair(cfg.crop_scale, "data.crop_scale", 0.0, 1.0);
  pair(cfg.crop_ratio, "data.crop_ratio", 0.0, 1e6);
  if (cfg.pixel_mean.size() != 3) throw Error("needs 3 numbers (R, G, B)", "data.pixel_mean");
  if (cfg.pixel_std.size() != 3 ||
      !std::all_of(cfg.pixel_std.begin(), cfg.pixel_std.end(), [](double v) { return v > 0; }))
    throw Error("needs 3 numbers (R, G, B), each > 0", "data.pixel_std");
}

std::string under(const std::string& path, const std::string& dir) {
  if (!dir.empty() && dir.front() == '/') return dir;
  if (path.empty()) return dir;
  return path + (path.back() == '/' ? "" : "/") + dir;
}

}  // namespace

ImageDecodeCounts image_decode_counts(const Dataset& dataset) {
  const auto* folder = dynamic_cast<const ImageFolderDataset*>(&dataset);
  return folder != nullptr ? folder->decode_counts() : ImageDecodeCounts{};
}

std::vector<std::string> image_input_files(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("no such file or folder: " + path, "--input");
  return S_ISDIR(st.st_mode) ? image_files_under(path) : std::vector<std::string>{path};
}

PredictInputs image_file_inputs(const std::string& path, const DataSpec& spec, bool scaled_decode) {
  if (spec.input_shape.size() != 3 || spec.input_shape[1] != spec.input_shape[2] ||
      spec.recipe.resize < 1)
    throw Error(
        "the run's preprocess.json gives no evaluation transform (input_shape [3, S, S], "
        "eval_transform.resize)",
        "--input");
  Folder f;
  f.root = path;
  f.classes = spec.recipe.class_names;
  PredictInputs out;
  out.names = image_input_files(path);
  for (const std::string& file : out.names) f.samples.push_back(Sample{file, 0});
  Transform t;
  t.train = false;
  t.size = spec.input_shape[2], t.resize = spec.recipe.resize, t.scaled_decode = scaled_decode;
  out.data = std::make_shared<ImageFolderDataset>(std::move(f), t, spec.num_classes,
                                                  spec.pixel_mean, spec.pixel_std, 0, at::kCPU,
                                                  DecodeChoice{false, "data.decode cpu"});
  return out;
}

Splits make_image_folder_splits(const DataConfig& cfg, int64_t seed, const at::Device& device) {
  check_settings(cfg);
  // Loader threads that can decode at once: data.workers (the training thread itself without
  // any), at most the CPUs this rank may use but the training thread's.
  const int cpus = std::max(1, affinity_cpus());
  const auto decoding_threads =
      static_cast<int>(std::min<int64_t>(std::max<int64_t>(1, cfg.workers), std::max(1, cpus - 1)));
  const DecodeChoice decode = choose_decode(cfg.decode, device, decoding_threads);
  if (cfg.train_dir.empty())
    throw Error("is empty: name the folder of training images", "data.train_dir");
  Folder train = scan_class_folders(under(cfg.path, cfg.train_dir), "data.train_dir", nullptr);
  const auto found = static_cast<int64_t>(train.classes.size());
  if (cfg.num_classes > 0 && cfg.num_classes < found)
    throw Error("is " + std::to_string(cfg.num_classes) + ", but " + train.root + " holds " +
                    std::to_string(found) + " class folders (labels 0.." +
                    std::to_string(found - 1) + "); leave it at 0 to take the folder's",
                "data.num_classes");
  const int64_t classes = cfg.num_classes > 0 ? cfg.num_classes : found;
  std::vector<double> mean = cfg.normalize ? cfg.pixel_mean : std::vector<double>{0, 0, 0};
  std::vector<double> stdev = cfg.normalize ? cfg.pixel_std : std::vector<double>{1, 1, 1};
  Transform t;
  t.size = cfg.image_size, t.resize = cfg.resize, t.scale = cfg.crop_scale,
  t.ratio = cfg.crop_ratio;
  t.hflip = cfg.hflip, t.scaled_decode = cfg.scaled_decode;
  t.augment = BatchAugment(cfg, static_cast<uint64_t>(seed), cfg.image_size, cfg.image_size);
  Splits out;
  std::vector<std::string> names = train.classes;
  out.train = std::make_shared<ImageFolderDataset>(std::move(train), t, classes, mean, stdev,
                                                   static_cast<uint64_t>(seed), device, decode);
  if (!cfg.test_dir.empty()) {
    t.train = false, t.augment = BatchAugment();
    out.test = std::make_shared<ImageFolderDataset>(
        scan_class_folders(under(cfg.path, cfg.test_dir), "data.test_dir", &names), t, classes,
        mean, stdev, static_cast<uint64_t>(seed), device, decode);
  }
  return out;
}

std::vector<FormatRegistration> image_folder_formats() {
  FormatRegistration f;
  f.name = DataFormat::kImageFolder.name();
  f.make_splits = make_image_folder_splits;
  f.preprocess_keys = {{"/input_shape", "data.image_size"},
                       {"/class_names", "data.train_dir (its class folders)"},
                       {"/pixels/std", "data.pixel_std, data.normalize"},
                       {"/pixels", "data.pixel_mean, data.normalize"}};
  f.eval_transform = true;
  f.predict_inputs = [](const std::string& path, const DataSpec& spec, const DataConfig& cfg) {
    return image_file_inputs(path, spec, cfg.scaled_decode);
  };
  return {std::move(f)};
}

}  // namespace dtrain::detail
