#include "train/batch_mix.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "data/images/augment_ops.h"
#include "data/images/auto_augment.h"
#include "data/images/image_transforms.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

// The stream of one step's draws on one rank; `salt` keeps the mix's and the erasing's apart.
SampleRandom step_random(uint64_t seed, int64_t epoch, int64_t step, int rank, uint64_t salt) {
  return SampleRandom(seed ^ salt, epoch, step * 65536 + rank);
}
constexpr uint64_t kMixSalt = 0x4D495855502D4355ull, kEraseSalt = 0x4552415345524153ull;

double normal(SampleRandom& r) {  // Box-Muller
  const double u1 = 1.0 - r.uniform(0, 1), u2 = r.uniform(0, 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double gamma_draw(double a, SampleRandom& r) {
  if (a < 1.0) return gamma_draw(a + 1.0, r) * std::pow(1.0 - r.uniform(0, 1), 1.0 / a);
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal(r);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - r.uniform(0, 1);
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace

double beta_draw(double alpha, SampleRandom& random) {
  const double x = gamma_draw(alpha, random), y = gamma_draw(alpha, random);
  return x + y > 0 ? x / (x + y) : 0.5;
}

MixDraw cutmix_box(double lambda, int64_t r_y, int64_t r_x, int64_t height, int64_t width) {
  MixDraw d;
  d.kind = MixDraw::Kind::kCutmix;
  d.lambda = lambda;
  const double r = 0.5 * std::sqrt(1.0 - lambda);
  const auto w_half = static_cast<int64_t>(r * static_cast<double>(width));
  const auto h_half = static_cast<int64_t>(r * static_cast<double>(height));
  d.x1 = std::max<int64_t>(r_x - w_half, 0);
  d.y1 = std::max<int64_t>(r_y - h_half, 0);
  d.x2 = std::min(r_x + w_half, width);
  d.y2 = std::min(r_y + h_half, height);
  d.target_lambda = 1.0 - static_cast<double>((d.x2 - d.x1) * (d.y2 - d.y1)) /
                              static_cast<double>(width * height);
  return d;
}

MixOptions mix_options(const Config& cfg, int64_t num_classes) {
  MixOptions o;
  o.mixup_alpha = cfg.train.mixup_alpha;
  o.cutmix_alpha = cfg.train.cutmix_alpha;
  o.cutmix_prob = cfg.train.cutmix_prob;
  o.mix_prob = cfg.train.mix_prob;
  o.random_erase = cfg.data.random_erase;
  o.num_classes = num_classes;
  o.seed = static_cast<uint64_t>(cfg.run.seed);
  return o;
}

BatchMix::BatchMix(const MixOptions& options, const at::Device& device, int rank)
    : options_(options), device_(device), rank_(rank) {
  params_ = parameters(MixDraw{}).to(device_);
}

// [images' weight in the box, outside it; the rolled images' in the box, outside it; y1, y2, x1,
// x2; the targets' weight, the rolled targets']. Each weight and its partner are rounded to
// float from double separately, as torchvision's mul_(lambda) and mul_(1.0 - lambda) round them.
at::Tensor BatchMix::parameters(const MixDraw& d) {
  std::vector<float> p(10);
  const auto f = [](double v) { return static_cast<float>(v); };
  if (d.kind == MixDraw::Kind::kMixup) {
    p = {f(d.lambda), f(d.lambda), f(1.0 - d.lambda),  f(1.0 - d.lambda),       0, 0,
         0,           0,           f(d.target_lambda), f(1.0 - d.target_lambda)};
  } else if (d.kind == MixDraw::Kind::kCutmix) {
    p = {0,
         1,
         1,
         0,
         f(static_cast<double>(d.y1)),
         f(static_cast<double>(d.y2)),
         f(static_cast<double>(d.x1)),
         f(static_cast<double>(d.x2)),
         f(d.target_lambda),
         f(1.0 - d.target_lambda)};
  } else {
    p = {1, 1, 0, 0, 0, 0, 0, 0, 1, 0};
  }
  return at::tensor(p, at::kFloat);
}

std::unique_ptr<BatchMix> make_batch_mix(const Config& cfg, int64_t num_classes,
                                         const at::Device& device, int rank) {
  const MixOptions o = mix_options(cfg, num_classes);
  if (!o.any()) return nullptr;
  if (o.mixes() && num_classes <= 0)
    throw Error("Mixup and CutMix mix class ids, but the data has no classes",
                cfg.train.mixup_alpha > 0 ? "train.mixup_alpha" : "train.cutmix_alpha");
  return std::make_unique<BatchMix>(o, device, rank);
}

void BatchMix::draw(int64_t epoch, int64_t step, const at::Tensor& inputs) {
  if (inputs.dim() != 4)
    throw Error("Mixup, CutMix and RandomErasing need images (N, C, H, W); the inputs are " +
                    std::to_string(inputs.dim()) + "-dimensional",
                options_.mixes()
                    ? (options_.mixup_alpha > 0 ? "train.mixup_alpha" : "train.cutmix_alpha")
                    : "data.random_erase");
  const int64_t images = inputs.size(0), height = inputs.size(2), width = inputs.size(3);
  MixDraw d;
  if (options_.mixes()) {
    SampleRandom r = step_random(options_.seed, epoch, step, rank_, kMixSalt);
    if (r.uniform(0, 1) < options_.mix_prob) {
      const bool both = options_.mixup_alpha > 0 && options_.cutmix_alpha > 0;
      const bool cutmix = both ? r.uniform(0, 1) < options_.cutmix_prob : options_.cutmix_alpha > 0;
      const double lambda = beta_draw(cutmix ? options_.cutmix_alpha : options_.mixup_alpha, r);
      if (cutmix) {
        const int64_t r_x = r.below(width), r_y = r.below(height);
        d = cutmix_box(lambda, r_y, r_x, height, width);
      } else {
        d.kind = MixDraw::Kind::kMixup;
        d.lambda = d.target_lambda = lambda;
      }
    }
  }
  last_ = d;
  const bool pinned = device_.is_cuda();
  // Into the rows of tensors that never move once large enough: a captured graph reads them.
  const auto copy = [&](at::Tensor& dst, const at::Tensor& src) {
    const at::Tensor host = pinned ? src.pin_memory() : src;
    if (!dst.defined() || dst.size(0) < src.size(0))
      dst = at::empty(src.sizes(), src.options().device(device_));
    dst.narrow(0, 0, src.size(0)).copy_(host, /*non_blocking=*/pinned);
  };
  if (options_.mixes()) copy(params_, parameters(d));
  if (options_.random_erase > 0) {
    SampleRandom r = step_random(options_.seed, epoch, step, rank_, kEraseSalt);
    std::vector<int64_t> boxes(static_cast<size_t>(images * 4), 0);
    for (size_t i = 0; i < static_cast<size_t>(images); ++i) {
      const CropBox b = random_erasing(options_.random_erase, height, width, r);
      boxes[4 * i] = b.top, boxes[4 * i + 1] = b.left, boxes[4 * i + 2] = b.height,
                boxes[4 * i + 3] = b.width;
    }
    copy(erase_, at::tensor(boxes, at::kLong).view({images, 4}));
  }
}

std::pair<at::Tensor, at::Tensor> BatchMix::apply(const at::Tensor& images,
                                                  const at::Tensor& targets) const {
  const bool erasing = options_.random_erase > 0;
  if (erasing && (!erase_.defined() || erase_.size(0) < images.size(0)))
    throw Error("batch mixing: " + std::to_string(images.size(0)) +
                    " images, but this step's erase boxes were drawn for " +
                    std::to_string(erase_.defined() ? erase_.size(0) : 0),
                "data.random_erase");
  return mix_with(images, targets, options_.num_classes, params_,
                  erasing ? erase_.narrow(0, 0, images.size(0)) : at::Tensor(), erasing,
                  options_.mixes());
}

std::pair<at::Tensor, at::Tensor> BatchMix::mix(const at::Tensor& images, const at::Tensor& targets,
                                                int64_t num_classes, const MixDraw& draw,
                                                const at::Tensor& erase) {
  return mix_with(images, targets, num_classes, parameters(draw).to(images.device()),
                  erase.defined() ? erase.to(images.device()) : erase, erase.defined(),
                  draw.kind != MixDraw::Kind::kNone);
}

std::pair<at::Tensor, at::Tensor> BatchMix::mix_with(const at::Tensor& images,
                                                     const at::Tensor& targets, int64_t num_classes,
                                                     const at::Tensor& p, const at::Tensor& erase,
                                                     bool erasing, bool mixing) {
  if (images.dim() != 4)
    throw Error("Mixup, CutMix and RandomErasing need images (N, C, H, W); the inputs are " +
                    std::to_string(images.dim()) + "-dimensional",
                mixing ? "train.mixup_alpha" : "data.random_erase");
  if (targets.scalar_type() != at::kLong || targets.dim() != 1)
    throw Error("Mixup and CutMix need one class id per image", "train.mixup_alpha");
  const int64_t h = images.size(2), w = images.size(3);
  const auto idx = at::TensorOptions().device(images.device()).dtype(at::kFloat);
  // A copy when erasing: the images may be the batch's own (float inputs pass through).
  at::Tensor x = images.to(at::kFloat, /*non_blocking=*/false, /*copy=*/erasing);
  if (erasing) erase_boxes_(x, erase);
  at::Tensor soft = at::one_hot(targets, num_classes).to(at::kFloat);
  if (!mixing) return {x.contiguous(images.suggest_memory_format()), soft};
  const auto at_ = [&](int64_t k) { return p.narrow(0, k, 1); };
  const at::Tensor rows = at::arange(h, idx).view({h, 1}), cols = at::arange(w, idx).view({1, w});
  const at::Tensor in_box = (rows >= at_(4)) & (rows < at_(5)) & (cols >= at_(6)) & (cols < at_(7));
  const at::Tensor own = at::where(in_box, at_(0), at_(1)),
                   rolled = at::where(in_box, at_(2), at_(3));
  const at::Tensor mixed = x * own + x.roll(1, 0) * rolled;
  const at::Tensor soft_mixed = soft * at_(8) + soft.roll(1, 0) * at_(9);
  return {mixed.contiguous(images.suggest_memory_format()), soft_mixed};
}

}  // namespace dtrain::detail
