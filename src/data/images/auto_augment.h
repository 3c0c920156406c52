// torchvision's automatic augmentation policies (torchvision 0.14, transforms.autoaugment) and
// RandomErasing's draw, each image's random choices made on the host from its SampleRandom
// (image_transforms.h: keyed by (seed, epoch, sample index)), the pixels then changed in batches
// on the device (augment_ops.h):
//   data.auto_augment trivial_augment_wide: TrivialAugmentWide(num_magnitude_bins=31)
//   data.auto_augment rand_augment: RandAugment(num_ops=data.rand_augment_ops,
//       magnitude=data.rand_augment_magnitude, num_magnitude_bins=31)
//   data.auto_augment auto_augment: AutoAugment(AutoAugmentPolicy.IMAGENET)
//   data.random_erase p: RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)
// all with interpolation NEAREST and fill None (zeros). The op spaces are torchvision's
// _augmentation_space tables (the float32 magnitudes torch.linspace gives, computed by the same
// ATen call) and the ImageNet policy its _get_policies; the draws follow each forward's order and
// distributions (which op, which magnitude bin, the sign, AutoAugment's sub-policy and the
// probability of each of its ops), from dtrain's stream instead of torch's generator.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/images/augment_ops.h"
#include "data/images/image_transforms.h"
#include "dtrain/config.h"

namespace dtrain::detail {

// One op of an op space: its magnitudes (the table's float32 values, as double), empty for the
// ops torchvision gives a 0-dim tensor (magnitude 0.0); `is_signed`: the sign is drawn.
struct OpSpace {
  AugmentOp op = AugmentOp::kIdentity;
  std::vector<double> magnitudes;
  bool is_signed = false;
};

// TrivialAugmentWide._augmentation_space(num_bins): Identity, ShearX, ShearY, TranslateX,
// TranslateY, Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast,
// Equalize, in that order (the order its draw indexes).
std::vector<OpSpace> trivial_augment_space(int64_t num_bins);
// RandAugment._augmentation_space(num_bins, (height, width)): the same 14 ops with RandAugment's
// tables (translations up to 150 / 331 of the width or height).
std::vector<OpSpace> rand_augment_space(int64_t num_bins, int64_t height, int64_t width);
// AutoAugment._augmentation_space(num_bins, (height, width)): ShearX ... Equalize without
// Identity, then Invert.
std::vector<OpSpace> auto_augment_space(int64_t num_bins, int64_t height, int64_t width);

// One op of an AutoAugment sub-policy: applied with `probability`, at magnitude bin
// `magnitude_bin` of the op space (num_bins 10), -1 for torchvision's None (magnitude 0.0).
struct PolicyOp {
  AugmentOp op = AugmentOp::kIdentity;
  double probability = 0;
  int64_t magnitude_bin = -1;
};
using SubPolicy = std::array<PolicyOp, 2>;
// AutoAugment._get_policies(AutoAugmentPolicy.IMAGENET): its 25 sub-policies, in order.
const std::vector<SubPolicy>& imagenet_policies();

// One data.auto_augment policy for images of height x width (the size after the crop), its op
// space computed once; draw() gives one image's ops, in the order torchvision applies them.
class AugmentPolicy {
 public:
  // `num_ops` and `magnitude` are RandAugment's (magnitude a bin of num_bins); the others ignore
  // them. Values out of range are an Error naming data.rand_augment_ops or
  // data.rand_augment_magnitude.
  AugmentPolicy(AutoAugment kind, int64_t height, int64_t width, int64_t num_ops = 2,
                int64_t magnitude = 9, int64_t num_bins = 31);

  AutoAugment kind() const { return kind_; }
  const std::vector<OpSpace>& space() const { return space_; }

  // One image's ops:
  //   TrivialAugmentWide.forward: an op uniformly of the 14; a magnitude bin uniformly of its
  //     table (none for 0-dim ops); for a signed op, negated with probability 0.5. One op.
  //   RandAugment.forward: num_ops times: an op uniformly of the 14, magnitude its table's bin
  //     `magnitude`; for a signed op, negated with probability 0.5. num_ops ops (Identity
  //     included, as drawn).
  //   AutoAugment.forward: a sub-policy uniformly of the 25 (get_params: the policy, then two
  //     uniforms in [0, 1), then two signs), each of its ops applied where its uniform is <= its
  //     probability, at its bin of the num_bins-10 space, negated where signed and its sign is 0.
  //     0, 1 or 2 ops.
  //   kNone: no ops.
  std::vector<OpDraw> draw(SampleRandom& random) const;

 private:
  AutoAugment kind_;
  int64_t num_ops_, magnitude_;
  std::vector<OpSpace> space_;
};

// data.auto_augment on training batches of height x width images: each image's ops drawn from
// its own stream, keyed by (run.seed, epoch, sample index) apart from its crop's, so an image
// gets the same ops on any number of ranks, loader threads and devices; then applied to the
// batch on its device (apply_augment). Off (data.auto_augment none, or default-made): the batch
// as it is.
class BatchAugment {
 public:
  BatchAugment() = default;
  BatchAugment(const DataConfig& data, uint64_t seed, int64_t height, int64_t width);
  bool active() const { return policy_ != nullptr; }
  // For the data line: "" when off, else ", automatic augmentation trivial_augment_wide".
  std::string describe() const;
  // `images` uint8 (N, C, H, W) of the samples `indices` in `epoch`: a new tensor (the input
  // when off or every op is Identity).
  at::Tensor operator()(const at::Tensor& images, const std::vector<int64_t>& indices,
                        int64_t epoch) const;

 private:
  uint64_t seed_ = 0;
  std::shared_ptr<const AugmentPolicy> policy_;
};

// RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0).forward's draws for a height x
// width image: erased with probability p (torch.rand(1) < p); then get_params: up to 10 attempts
// of an area share uniform in [0.02, 0.33) and an aspect ratio h / w log-uniform in [0.3, 3.3),
// h = int(round(sqrt(area * ratio))), w = int(round(sqrt(area / ratio))) (halves to even); the
// first with h < height and w < width is placed uniformly (top, then left). Not erased, or no
// attempt fitting (torchvision's fall-back returns the image unchanged): an empty box (0, 0, 0,
// 0). The box is a row of erase_boxes_'s (augment_ops.h).
CropBox random_erasing(double p, int64_t height, int64_t width, SampleRandom& random);

}  // namespace dtrain::detail
