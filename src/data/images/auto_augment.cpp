// torchvision's automatic augmentation policies and RandomErasing's draw (auto_augment.h).
#include "data/images/auto_augment.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

using Op = AugmentOp;

// torch.linspace(start, end, bins) in the default dtype, float32, read back as double: the same
// ATen call as Python's, so the same values to the last bit.
std::vector<double> linspace_table(double start, double end, int64_t bins) {
  const at::Tensor t = at::linspace(start, end, bins, at::kFloat);
  const auto a = t.accessor<float, 1>();
  std::vector<double> v(static_cast<size_t>(bins));
  for (int64_t i = 0; i < bins; ++i) v[static_cast<size_t>(i)] = a[i];
  return v;
}

// 8 - (torch.arange(bins) / ((bins - 1) / levels)).round().int(): the division in float32,
// rounded half to even.
std::vector<double> posterize_table(int64_t bins, double levels) {
  const at::Tensor t =
      at::arange(bins).div(static_cast<double>(bins - 1) / levels).round().to(at::kInt);
  const auto a = t.accessor<int32_t, 1>();
  std::vector<double> v(static_cast<size_t>(bins));
  for (int64_t i = 0; i < bins; ++i) v[static_cast<size_t>(i)] = 8 - a[i];
  return v;
}

// The largest magnitudes of an op space's tables (each table linspace(0, max, bins)).
struct SpaceLimits {
  double shear, translate_x, translate_y, rotate, color, posterize_levels;
};

// The 13 ops the three spaces share, in torchvision's order: ShearX ... Equalize.
std::vector<OpSpace> shared_space(int64_t bins, const SpaceLimits& l) {
  std::vector<OpSpace> s;
  s.push_back({Op::kShearX, linspace_table(0.0, l.shear, bins), true});
  s.push_back({Op::kShearY, linspace_table(0.0, l.shear, bins), true});
  s.push_back({Op::kTranslateX, linspace_table(0.0, l.translate_x, bins), true});
  s.push_back({Op::kTranslateY, linspace_table(0.0, l.translate_y, bins), true});
  s.push_back({Op::kRotate, linspace_table(0.0, l.rotate, bins), true});
  for (const Op op : {Op::kBrightness, Op::kColor, Op::kContrast, Op::kSharpness})
    s.push_back({op, linspace_table(0.0, l.color, bins), true});
  s.push_back({Op::kPosterize, posterize_table(bins, l.posterize_levels), false});
  s.push_back({Op::kSolarize, linspace_table(255.0, 0.0, bins), false});
  s.push_back({Op::kAutoContrast, {}, false});
  s.push_back({Op::kEqualize, {}, false});
  return s;
}

void check_bins(int64_t bins) {
  if (bins < 2)
    throw Error("an op space needs 2 magnitude bins or more, got " + std::to_string(bins) +
                " (internal error)");
}

// Python's int(round(x)) for x >= 0: halves to even.
int64_t python_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

std::vector<OpSpace> trivial_augment_space(int64_t num_bins) {
  check_bins(num_bins);
  std::vector<OpSpace> s = {{Op::kIdentity, {}, false}};
  for (auto& o : shared_space(num_bins, {0.99, 32.0, 32.0, 135.0, 0.99, 6}))
    s.push_back(std::move(o));
  return s;
}

std::vector<OpSpace> rand_augment_space(int64_t num_bins, int64_t height, int64_t width) {
  check_bins(num_bins);
  std::vector<OpSpace> s = {{Op::kIdentity, {}, false}};
  const double tx = 150.0 / 331.0 * static_cast<double>(width),
               ty = 150.0 / 331.0 * static_cast<double>(height);
  for (auto& o : shared_space(num_bins, {0.3, tx, ty, 30.0, 0.9, 4})) s.push_back(std::move(o));
  return s;
}

std::vector<OpSpace> auto_augment_space(int64_t num_bins, int64_t height, int64_t width) {
  check_bins(num_bins);
  const double tx = 150.0 / 331.0 * static_cast<double>(width),
               ty = 150.0 / 331.0 * static_cast<double>(height);
  std::vector<OpSpace> s = shared_space(num_bins, {0.3, tx, ty, 30.0, 0.9, 4});
  s.push_back({Op::kInvert, {}, false});
  return s;
}

const std::vector<SubPolicy>& imagenet_policies() {
  static const std::vector<SubPolicy> policies = {
      {{{Op::kPosterize, 0.4, 8}, {Op::kRotate, 0.6, 9}}},
      {{{Op::kSolarize, 0.6, 5}, {Op::kAutoContrast, 0.6, -1}}},
      {{{Op::kEqualize, 0.8, -1}, {Op::kEqualize, 0.6, -1}}},
      {{{Op::kPosterize, 0.6, 7}, {Op::kPosterize, 0.6, 6}}},
      {{{Op::kEqualize, 0.4, -1}, {Op::kSolarize, 0.2, 4}}},
      {{{Op::kEqualize, 0.4, -1}, {Op::kRotate, 0.8, 8}}},
      {{{Op::kSolarize, 0.6, 3}, {Op::kEqualize, 0.6, -1}}},
      {{{Op::kPosterize, 0.8, 5}, {Op::kEqualize, 1.0, -1}}},
      {{{Op::kRotate, 0.2, 3}, {Op::kSolarize, 0.6, 8}}},
      {{{Op::kEqualize, 0.6, -1}, {Op::kPosterize, 0.4, 6}}},
      {{{Op::kRotate, 0.8, 8}, {Op::kColor, 0.4, 0}}},
      {{{Op::kRotate, 0.4, 9}, {Op::kEqualize, 0.6, -1}}},
      {{{Op::kEqualize, 0.0, -1}, {Op::kEqualize, 0.8, -1}}},
      {{{Op::kInvert, 0.6, -1}, {Op::kEqualize, 1.0, -1}}},
      {{{Op::kColor, 0.6, 4}, {Op::kContrast, 1.0, 8}}},
      {{{Op::kRotate, 0.8, 8}, {Op::kColor, 1.0, 2}}},
      {{{Op::kColor, 0.8, 8}, {Op::kSolarize, 0.8, 7}}},
      {{{Op::kSharpness, 0.4, 7}, {Op::kInvert, 0.6, -1}}},
      {{{Op::kShearX, 0.6, 5}, {Op::kEqualize, 1.0, -1}}},
      {{{Op::kColor, 0.4, 0}, {Op::kEqualize, 0.6, -1}}},
      {{{Op::kEqualize, 0.4, -1}, {Op::kSolarize, 0.2, 4}}},
      {{{Op::kSolarize, 0.6, 5}, {Op::kAutoContrast, 0.6, -1}}},
      {{{Op::kInvert, 0.6, -1}, {Op::kEqualize, 1.0, -1}}},
      {{{Op::kColor, 0.6, 4}, {Op::kContrast, 1.0, 8}}},
      {{{Op::kEqualize, 0.8, -1}, {Op::kEqualize, 0.6, -1}}},
  };
  return policies;
}

AugmentPolicy::AugmentPolicy(AutoAugment kind, int64_t height, int64_t width, int64_t num_ops,
                             int64_t magnitude, int64_t num_bins)
    : kind_(kind), num_ops_(num_ops), magnitude_(magnitude) {
  if (height < 1 || width < 1)
    throw Error("automatic augmentation needs images of 1x1 pixels or more, got " +
                std::to_string(height) + "x" + std::to_string(width) + " (internal error)");
  switch (kind) {
    case AutoAugment::kTrivialAugmentWide:
      space_ = trivial_augment_space(num_bins);
      break;
    case AutoAugment::kRandAugment:
      if (num_ops < 0)
        throw Error("must be 0 or more, got " + std::to_string(num_ops), "data.rand_augment_ops");
      if (magnitude < 0 || magnitude >= num_bins)
        throw Error("must be a magnitude bin 0.." + std::to_string(num_bins - 1) + ", got " +
                        std::to_string(magnitude),
                    "data.rand_augment_magnitude");
      space_ = rand_augment_space(num_bins, height, width);
      break;
    case AutoAugment::kAutoAugment:
      space_ = auto_augment_space(10, height,
                                  width);  // AutoAugment.forward: _augmentation_space(10, ...)
      break;
    case AutoAugment::kNone:
      break;
  }
}

std::vector<OpDraw> AugmentPolicy::draw(SampleRandom& random) const {
  std::vector<OpDraw> ops;
  const auto ops_in_space = static_cast<int64_t>(space_.size());
  switch (kind_) {
    case AutoAugment::kTrivialAugmentWide: {
      const OpSpace& s = space_[static_cast<size_t>(random.below(ops_in_space))];
      double m = 0.0;
      if (!s.magnitudes.empty())
        m = s.magnitudes[static_cast<size_t>(
            random.below(static_cast<int64_t>(s.magnitudes.size())))];
      if (s.is_signed && random.below(2) == 1) m *= -1.0;
      ops.push_back({s.op, m});
      break;
    }
    case AutoAugment::kRandAugment:
      for (int64_t k = 0; k < num_ops_; ++k) {
        const OpSpace& s = space_[static_cast<size_t>(random.below(ops_in_space))];
        double m = s.magnitudes.empty() ? 0.0 : s.magnitudes[static_cast<size_t>(magnitude_)];
        if (s.is_signed && random.below(2) == 1) m *= -1.0;
        ops.push_back({s.op, m});
      }
      break;
    case AutoAugment::kAutoAugment: {
      const auto& policies = imagenet_policies();
      // get_params: the sub-policy, two probabilities, two signs, drawn before any is used
      const SubPolicy& policy =
          policies[static_cast<size_t>(random.below(static_cast<int64_t>(policies.size())))];
      const double probs[2] = {random.uniform(0, 1), random.uniform(0, 1)};
      const int64_t signs[2] = {random.below(2), random.below(2)};
      for (size_t i = 0; i < 2; ++i) {
        const PolicyOp& p = policy[i];
        if (!(probs[i] <= p.probability)) continue;
        const OpSpace* s = nullptr;
        for (const auto& o : space_)
          if (o.op == p.op) s = &o;
        double m = p.magnitude_bin >= 0 ? s->magnitudes[static_cast<size_t>(p.magnitude_bin)] : 0.0;
        if (s->is_signed && signs[i] == 0) m *= -1.0;
        ops.push_back({p.op, m});
      }
      break;
    }
    case AutoAugment::kNone:
      break;
  }
  return ops;
}

BatchAugment::BatchAugment(const DataConfig& data, uint64_t seed, int64_t height, int64_t width)
    : seed_(seed ^ 0x4155544F41554745ull) {
  if (data.auto_augment != AutoAugment::kNone)
    policy_ = std::make_shared<AugmentPolicy>(data.auto_augment, height, width,
                                              data.rand_augment_ops, data.rand_augment_magnitude);
}

std::string BatchAugment::describe() const {
  return policy_ ? std::string(", automatic augmentation ") + to_string(policy_->kind())
                 : std::string();
}

at::Tensor BatchAugment::operator()(const at::Tensor& images, const std::vector<int64_t>& indices,
                                    int64_t epoch) const {
  if (!policy_) return images;
  std::vector<std::vector<OpDraw>> ops;
  ops.reserve(indices.size());
  for (const int64_t i : indices) {
    SampleRandom random(seed_, epoch, i);
    ops.push_back(policy_->draw(random));
  }
  return apply_augment(images, ops);
}

CropBox random_erasing(double p, int64_t height, int64_t width, SampleRandom& random) {
  if (!(random.uniform(0, 1) < p)) return {};
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(0.3), log_hi = std::log(3.3);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * random.uniform(0.02, 0.33);
    const double aspect = std::exp(random.uniform(log_lo, log_hi));
    const int64_t h = python_round(std::sqrt(erase_area * aspect));
    const int64_t w = python_round(std::sqrt(erase_area / aspect));
    if (!(h < height && w < width)) continue;
    const int64_t top = random.below(height - h + 1);
    const int64_t left = random.below(width - w + 1);
    return CropBox{top, left, h, w};
  }
  return {};  // torchvision returns the image itself as the "erased" box: unchanged
}

}  // namespace dtrain::detail
