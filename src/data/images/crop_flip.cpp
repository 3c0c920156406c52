// Random crops of zero-padded images and random flips, drawn per sample (crop_flip.h).
//
// Note [cifar augmentation]: CIFAR's training recipe, data.crop_padding P and data.hflip, is
// torchvision's Compose([RandomCrop(32, padding=P), RandomHorizontalFlip()]) on the uint8
// images: each image is padded by P pixels of value 0 on every side (torchvision's fill 0, applied
// before ToTensor and Normalize: black pixels, not the mean) and a 32x32 crop is taken at a
// uniform place (top, then left, each in [0, 2P]), so the image moves by dx, dy in [-P, P] with
// zeros shifted in; then half the images are mirrored left to right (image_transforms.h,
// random_pad_crop and pad_crop). The draws come from SampleRandom(run.seed, epoch, sample index)
// as image_folder's do (Note [image transforms]): a run is the same on any number of ranks and
// after a resume, and a sample the sampler repeats within an epoch gets the same crop twice. Only
// the training split is augmented; the test split is read as it is. Off unless asked for:
// data.crop_padding defaults to 0, and a config read from YAML (Config::from_string, from_file)
// for cifar10 or cifar100 that does not set data.hflip (on by default, for image_folder) gets
// data.hflip false, so a config written before these keys reads the same pixels. A DataConfig
// filled in C++ keeps the value it holds.
#include "data/images/crop_flip.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "data/images/image_transforms.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

class CropFlipDataset : public Dataset {
 public:
  CropFlipDataset(std::shared_ptr<TensorDataset> images, int64_t padding, bool hflip, uint64_t seed,
                  BatchAugment augment)
      : images_(std::move(images)),
        padding_(padding),
        hflip_(hflip),
        seed_(seed),
        augment_(std::move(augment)) {
    const at::Tensor& x = images_->inputs();
    if (x.scalar_type() != at::kByte || x.dim() != 4 || padding_ < 0)
      throw Error(
          "random crops and flips need uint8 images (N, C, H, W) and a padding >= 0 (internal "
          "error)",
          images_->describe());
    const std::string side =
        format("%lldx%lld", static_cast<long long>(x.size(2)), static_cast<long long>(x.size(3)));
    std::string how;
    if (padding_ > 0)
      how = format("random %s crops of the image padded by %lld zero pixels", side.c_str(),
                   static_cast<long long>(padding_));
    if (hflip_) how += padding_ > 0 ? ", flipped at random" : "flipped at random";
    if (augment_.active()) how += how.empty() ? augment_.describe().substr(2) : augment_.describe();
    description_ = images_->describe() + ", training: " + how;
  }

  int64_t size() const override { return images_->size(); }
  Batch get(const std::vector<int64_t>& indices) const override { return fetch(indices, 0, false); }
  Batch get_pinned(const std::vector<int64_t>& indices) const override {
    return fetch(indices, 0, true);
  }
  DataSpec spec() const override { return images_->spec(); }
  std::string describe() const override { return description_; }

  Batch fetch(const std::vector<int64_t>& indices, int64_t epoch, bool pinned) const override {
    Batch b =
        pinned ? images_->get_pinned(indices) : images_->get(indices);  // gathered, indices checked
    const int64_t channels = b.inputs.size(1), height = b.inputs.size(2), width = b.inputs.size(3);
    const int64_t image = channels * height * width;
    std::vector<uint8_t> original(static_cast<size_t>(image));
    uint8_t* x = b.inputs.data_ptr<uint8_t>();
    for (size_t k = 0; k < indices.size(); ++k) {
      SampleRandom random(seed_, epoch, indices[k]);
      const PadCrop p = random_pad_crop(padding_, hflip_, random);
      if (p.dx == 0 && p.dy == 0 && !p.flip) continue;
      uint8_t* px = x + static_cast<int64_t>(k) * image;
      std::memcpy(original.data(), px, original.size());
      pad_crop(original.data(), channels, height, width, p, px);
    }
    if (augment_.active()) b.inputs.copy_(augment_(b.inputs, indices, epoch));  // stays pinned
    return b;
  }

 private:
  std::shared_ptr<TensorDataset> images_;
  int64_t padding_;
  bool hflip_;
  uint64_t seed_;
  BatchAugment augment_;
  std::string description_;
};

}  // namespace

std::shared_ptr<Dataset> random_crop_flip(std::shared_ptr<TensorDataset> images, int64_t padding,
                                          bool hflip, uint64_t seed, BatchAugment augment) {
  return std::make_shared<CropFlipDataset>(std::move(images), padding, hflip, seed,
                                           std::move(augment));
}

}  // namespace dtrain::detail
