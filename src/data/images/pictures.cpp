// `dtrain predict`'s pictures for a run trained on images of one size (idx: 1 x H x W gray;
// cifar10 / cifar100: 3 x 32 x 32 RGB): PNG and JPEG files of any size, made the run's channels
// and resized whole to its H x W as PIL does (inputs.h, picture_inputs).
#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/files.h"
#include "data/formats/inputs.h"
#include "data/images/image_codec.h"
#include "data/images/image_transforms.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

// PIL's convert("L") of an RGB pixel (Convert.c, rgb2l): ITU-R 601-2 luma, R 299/1000 + G
// 587/1000 + B 114/1000, in 16-bit fixed point and rounded (PIL's L24), not truncated.
inline uint8_t luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

class PictureDataset : public Dataset {
 public:
  PictureDataset(std::vector<std::string> files, DataSpec spec, std::string description)
      : files_(std::move(files)), spec_(std::move(spec)), description_(std::move(description)) {}

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  DataSpec spec() const override { return spec_; }
  std::string describe() const override { return description_; }

  Batch get(const std::vector<int64_t>& indices) const override {
    const auto n = static_cast<int64_t>(indices.size());
    const int64_t c = spec_.input_shape[0], h = spec_.input_shape[1], w = spec_.input_shape[2];
    at::Tensor pixels = at::empty({n, c, h, w}, at::kByte);
    Worker worker;
    worker.planes.resize(static_cast<size_t>(3 * h * w));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = indices[static_cast<size_t>(k)];
      if (i < 0 || i >= size())
        throw Error("sample index " + std::to_string(i) + " is out of range [0, " +
                        std::to_string(size()) + ")",
                    description_);
      load(files_[static_cast<size_t>(i)], worker);
      // (3, H, W) planes; a gray picture's three are equal, the first taken.
      std::memcpy(pixels.data_ptr<uint8_t>() + k * c * h * w, worker.planes.data(),
                  static_cast<size_t>(c * h * w));
    }
    const at::Tensor targets = at::zeros({n}, at::kLong);
    if (c == 1) return Batch{idx_standardized(pixels, spec_.recipe), targets};
    return Batch{pixels, targets};
  }

 private:
  struct Worker {
    JpegDecoder jpeg;
    Resampler resampler;
    RgbImage image;
    std::vector<uint8_t> bytes, planes;
  };

  // One picture into worker.planes: 3 planes of H x W.
  void load(const std::string& path, Worker& worker) const {
    const size_t n = read_file_into(path, worker.bytes);
    const uint8_t* data = worker.bytes.data();
    RgbImage& image = worker.image;
    if (sniff_image(data, n, path) == ImageFormat::kJpeg) {
      worker.jpeg.decode(data, n, path, JpegScale{}, image);  // full size, as PIL decodes it
    } else {
      decode_png(data, n, path, image);
    }
    if (spec_.input_shape[0] == 1) {
      // Gray before the resize, as PIL's convert("L").resize(...): each pixel's luma in all three
      // channels, which the resampler then treats alike.
      uint8_t* p = image.pixels.data();
      for (int64_t i = 0; i < image.width * image.height; ++i, p += 3) p[0] = p[1] = p[2] = luma(p);
    }
    const int64_t h = spec_.input_shape[1], w = spec_.input_shape[2];
    const RgbView view{image.pixels.data(), image.width, image.height, image.width * 3};
    ResamplePlan whole;
    whole.region = CropBox{0, 0, image.height, image.width};
    whole.box = Box{0, 0, static_cast<double>(image.width), static_cast<double>(image.height)};
    whole.grid_width = w, whole.grid_height = h;
    whole.window = CropBox{0, 0, h, w};
    worker.resampler.run(view, whole, worker.planes.data());
  }

  std::vector<std::string> files_;
  DataSpec spec_;
  std::string description_;
};

}  // namespace

PredictInputs picture_inputs(const std::string& path, const DataSpec& spec) {
  const std::vector<int64_t>& shape = spec.input_shape;
  if (shape.size() != 3 || (shape[0] != 1 && shape[0] != 3))
    throw Error(
        "the run's input_shape is not that of images (C, H, W) with 1 or 3 channels: predict "
        "cannot "
        "make pictures into its inputs",
        "--input");
  PredictInputs out;
  out.names = image_input_files(path);
  const std::string description =
      format("%zu picture%s of %s (PNG, JPEG), made %s and resized to %lld x %lld (PIL's bilinear)",
             out.names.size(), out.names.size() == 1 ? "" : "s", path.c_str(),
             shape[0] == 1 ? "gray" : "RGB", static_cast<long long>(shape[2]),
             static_cast<long long>(shape[1]));
  out.data = std::make_shared<PictureDataset>(out.names, spec, description);
  return out;
}

}  // namespace dtrain::detail
