// torchvision's automatic-augmentation ops on uint8 image batches (augment_ops.h). Each group's
// code follows transforms.functional_tensor's function of the same op, operation for operation
// (the same dtypes, the same order of float32 arithmetic), so that the rounding is torchvision's.
#include "data/images/augment_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

constexpr double kAugmentPi = 3.14159265358979323846;     // Python's math.pi
constexpr double kDegreesToRadians = kAugmentPi / 180.0;  // math.radians(x) = x * (pi / 180)
constexpr double kRadiansToDegrees = 180.0 / kAugmentPi;  // math.degrees(x) = x * (180 / pi)
constexpr int64_t kOpParams = 6;  // each image's parameters: an affine matrix, or up to two numbers

const char* const kAugmentOpNames[kAugmentOps] = {
    "Identity",  "ShearX",     "ShearY",       "TranslateX", "TranslateY",
    "Rotate",    "Brightness", "Color",        "Contrast",   "Sharpness",
    "Posterize", "Solarize",   "AutoContrast", "Equalize",   "Invert"};

bool is_affine_op(AugmentOp op) { return op >= AugmentOp::kShearX && op <= AugmentOp::kRotate; }
bool is_blend_op(AugmentOp op) {
  return op >= AugmentOp::kBrightness && op <= AugmentOp::kSharpness;
}

using AffineMatrix = std::array<double, 6>;

// functional._get_inverse_affine_matrix(center, angle, translate, scale 1.0, shear), inverted,
// in double as Python computes it (degrees in, the same libm calls, the same order).
AffineMatrix inverse_affine(double cx, double cy, double angle, double tx, double ty,
                            double shear_x, double shear_y) {
  const double rot = angle * kDegreesToRadians;
  const double sx = shear_x * kDegreesToRadians, sy = shear_y * kDegreesToRadians;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  AffineMatrix m = {d, -b, 0.0, -c, a, 0.0};  // divided by scale 1.0: unchanged
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

// The matrix _apply_op hands F_t.affine / F_t.rotate for an affine op of magnitude m. Centers are
// relative to the image's middle: the shears pass center=[0, 0] (the top-left corner, so
// (0 - w * 0.5, 0 - h * 0.5)); the translations and the rotation none (the middle, (0, 0)).
AffineMatrix op_matrix(AugmentOp op, double m, int64_t height, int64_t width) {
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  const double shift = static_cast<double>(static_cast<int64_t>(m));  // int(magnitude), toward 0
  switch (op) {
    case AugmentOp::kShearX:
      return inverse_affine(0 - w * 0.5, 0 - h * 0.5, 0.0, 0.0, 0.0,
                            std::atan(m) * kRadiansToDegrees, 0.0);
    case AugmentOp::kShearY:
      return inverse_affine(0 - w * 0.5, 0 - h * 0.5, 0.0, 0.0, 0.0, 0.0,
                            std::atan(m) * kRadiansToDegrees);
    case AugmentOp::kTranslateX:
      return inverse_affine(0.0, 0.0, 0.0, shift, 0.0, 0.0, 0.0);
    case AugmentOp::kTranslateY:
      return inverse_affine(0.0, 0.0, 0.0, 0.0, shift, 0.0, 0.0);
    default:  // Rotate: F.rotate passes -angle (its angle counter-clockwise, affine's clockwise)
      return inverse_affine(0.0, 0.0, -m, 0.0, 0.0, 0.0, 0.0);
  }
}

// An op's parameters for its group, written into `row`; refuses what torchvision refuses.
void fill_params(const OpDraw& d, int64_t height, int64_t width, float* row) {
  auto refuse = [&](const std::string& why) {
    throw Error(std::string(augment_op_name(d.op)) + " with magnitude " +
                std::to_string(d.magnitude) + ": " + why + " (internal error)");
  };
  if (is_affine_op(d.op)) {
    const AffineMatrix m = op_matrix(d.op, d.magnitude, height, width);
    for (int k = 0; k < 6; ++k)
      row[k] = static_cast<float>(m[static_cast<size_t>(k)]);  // theta, float32
  } else if (is_blend_op(d.op)) {
    const double ratio = 1.0 + d.magnitude;
    if (!(ratio >= 0)) refuse("the factor 1 + magnitude is below 0");
    row[0] = static_cast<float>(ratio);        // _blend: ratio * img1 ...
    row[1] = static_cast<float>(1.0 - ratio);  // ... + (1.0 - ratio) * img2, each factor as float32
  } else if (d.op == AugmentOp::kPosterize) {
    const auto bits = static_cast<int64_t>(d.magnitude);
    if (bits < 0 || bits > 8) refuse("posterize keeps 0 to 8 bits");
    row[0] = static_cast<float>((256 - (int64_t{1} << (8 - bits))) &
                                255);  // -(2 ** (8 - bits)) as uint8
  } else if (d.op == AugmentOp::kSolarize) {
    if (!(d.magnitude <= 255)) refuse("the threshold is above 255");
    row[0] = static_cast<float>(d.magnitude);  // compared with the pixels in float32
  }
}

// F_t.affine / F_t.rotate of each image with its matrix: theta (M, 6) float32 on the device.
at::Tensor affine_group(const at::Tensor& img, const at::Tensor& params) {
  const int64_t m = img.size(0), h = img.size(2), w = img.size(3);
  const auto hd = static_cast<double>(h), wd = static_cast<double>(w);
  const at::Tensor theta = params.reshape({m, 2, 3});
  const auto opts = theta.options();
  // _gen_affine_grid(theta, w, h, ow=w, oh=h), d = 0.5
  at::Tensor base = at::empty({1, h, w, 3}, opts);
  base.select(3, 0).copy_(at::linspace(-wd * 0.5 + 0.5, wd * 0.5 + 0.5 - 1, w, opts));
  base.select(3, 1).copy_(
      at::linspace(-hd * 0.5 + 0.5, hd * 0.5 + 0.5 - 1, h, opts).unsqueeze_(-1));
  base.select(3, 2).fill_(1);
  const at::Tensor rescaled = theta.transpose(1, 2) / at::tensor({0.5 * wd, 0.5 * hd}, opts);
  const at::Tensor grid =
      base.view({1, h * w, 3}).expand({m, h * w, 3}).bmm(rescaled).view({m, h, w, 2});
  // _apply_grid_transform: grid_sample(nearest, zeros, align_corners=False) in float32, then
  // _cast_squeeze_out: round, uint8
  const at::Tensor out =
      at::grid_sampler(img.to(at::kFloat), grid, /*nearest*/ 1, /*zeros*/ 0, false);
  return out.round().to(at::kByte);
}

// _blend(img1, img2, ratio): (ratio * img1 + (1 - ratio) * img2).clamp(0, 255).to(uint8), each
// image's ratio and 1 - ratio in params' first two columns.
at::Tensor blend(const at::Tensor& img, const at::Tensor& other, const at::Tensor& params) {
  const int64_t m = img.size(0);
  const at::Tensor ratio = params.select(1, 0).reshape({m, 1, 1, 1});
  const at::Tensor rest = params.select(1, 1).reshape({m, 1, 1, 1});
  return (img * ratio + other * rest).clamp(0, 255).to(at::kByte);
}

// F_t.rgb_to_grayscale of (M, 3, H, W): (0.2989 r + 0.587 g + 0.114 b).to(uint8), (M, 1, H, W).
at::Tensor grayscale(const at::Tensor& img) {
  return (img.select(1, 0) * 0.2989 + img.select(1, 1) * 0.587 + img.select(1, 2) * 0.114)
      .to(at::kByte)
      .unsqueeze(1);
}

// F_t._blurred_degenerate_image: the 3x3 kernel (1s, 5 in the middle, / their sum) over each
// channel (conv2d, groups = C), rounded; the border rows and columns keep the image's pixels.
at::Tensor blurred(const at::Tensor& img) {
  const int64_t c = img.size(1), h = img.size(2), w = img.size(3);
  at::Tensor kernel = at::ones({3, 3}, img.options().dtype(at::kFloat));
  kernel.select(0, 1).select(0, 1).fill_(5.0);
  kernel /= kernel.sum();
  const at::Tensor inner = at::conv2d(img.to(at::kFloat), kernel.expand({c, 1, 3, 3}), {},
                                      at::IntArrayRef{1}, at::IntArrayRef{0}, at::IntArrayRef{1}, c)
                               .round()
                               .to(at::kByte);
  at::Tensor result = img.clone();
  result.narrow(2, 1, h - 2).narrow(3, 1, w - 2).copy_(inner);
  return result;
}

// F_t.autocontrast: per channel, (img - min) * (255 / (max - min)) clamped and truncated; Python's
// `bound / tensor` is Tensor.__rtruediv__, tensor.reciprocal() * bound.
at::Tensor autocontrast(const at::Tensor& img) {
  at::Tensor minimum = img.amin({2, 3}, true).to(at::kFloat);
  const at::Tensor maximum = img.amax({2, 3}, true).to(at::kFloat);
  at::Tensor scale = (maximum - minimum).reciprocal() * 255.0;
  const at::Tensor constant = scale.isfinite().logical_not();
  minimum.masked_fill_(constant, 0);
  scale.masked_fill_(constant, 1);
  return ((img - minimum) * scale).clamp(0, 255).to(at::kByte);
}

// F_t.equalize (_scale_channel on each channel of each image), every channel of the group at once:
// the histograms by scatter_add of ones at 256 * channel + value, in int64 as bincount counts.
at::Tensor equalize(const at::Tensor& img) {
  const int64_t rows = img.size(0) * img.size(1), pixels = img.size(2) * img.size(3);
  const auto lopts = img.options().dtype(at::kLong);
  const at::Tensor values = img.reshape({rows, pixels}).to(at::kLong);
  const at::Tensor slots = values + at::arange(rows, lopts).mul_(256).unsqueeze_(1);
  const at::Tensor hist = at::zeros({rows * 256}, lopts)
                              .scatter_add_(0, slots.reshape(-1), at::ones({rows * pixels}, lopts))
                              .view({rows, 256});
  // step = sum(nonzero_hist[:-1]) // 255: all pixels but those of the highest value present
  const at::Tensor last =
      at::where(hist > 0, at::arange(256, lopts), at::full({}, -1, lopts)).amax(1, true);
  const at::Tensor step = at::div(hist.sum(1, true) - hist.gather(1, last), 255, "floor");
  // lut = (cumsum(hist) + step // 2) // step, shifted one bin up (pad [1, 0], [:-1]), clamped
  const at::Tensor lut =
      at::div(hist.cumsum(1) + at::div(step, 2, "floor"), step.clamp_min(1), "floor");
  const at::Tensor shifted =
      at::cat({at::zeros({rows, 1}, lopts), lut.narrow(1, 0, 255)}, 1).clamp(0, 255);
  const at::Tensor mapped =
      at::where(step == 0, values, shifted.gather(1, values));  // step 0: unchanged
  return mapped.to(at::kByte).view(img.sizes());
}

// One group's images (M, C, H, W) under `op`, with their parameters (M, kOpParams) float32.
// Undefined: the group is unchanged.
at::Tensor apply_group(AugmentOp op, const at::Tensor& img, const at::Tensor& params) {
  const int64_t m = img.size(0), c = img.size(1), h = img.size(2), w = img.size(3);
  switch (op) {
    case AugmentOp::kShearX:
    case AugmentOp::kShearY:
    case AugmentOp::kTranslateX:
    case AugmentOp::kTranslateY:
    case AugmentOp::kRotate:
      return affine_group(img, params);
    case AugmentOp::kBrightness:  // _blend with zeros_like(img): (1 - ratio) * 0 adds nothing
      return (img * params.select(1, 0).reshape({m, 1, 1, 1})).clamp(0, 255).to(at::kByte);
    case AugmentOp::kColor:  // adjust_saturation: one channel is returned as it is
      return c == 1 ? at::Tensor() : blend(img, grayscale(img), params);
    case AugmentOp::kContrast: {
      const at::Tensor gray = c == 3 ? grayscale(img) : img;
      return blend(img, gray.to(at::kFloat).mean({1, 2, 3}, true), params);
    }
    case AugmentOp::kSharpness:  // images of 2 rows or columns or fewer are returned as they are
      return h <= 2 || w <= 2 ? at::Tensor() : blend(img, blurred(img), params);
    case AugmentOp::kPosterize:
      return img.bitwise_and(params.select(1, 0).to(at::kByte).reshape({m, 1, 1, 1}));
    case AugmentOp::kSolarize:  // F_t.invert is 255 - img: the bits flipped
      return at::where(img >= params.select(1, 0).reshape({m, 1, 1, 1}), img.bitwise_not(), img);
    case AugmentOp::kAutoContrast:
      return autocontrast(img);
    case AugmentOp::kEqualize:
      return equalize(img);
    case AugmentOp::kInvert:
      return img.bitwise_not();
    case AugmentOp::kIdentity:
      break;
  }
  return at::Tensor();
}

}  // namespace

const char* augment_op_name(AugmentOp op) {
  const auto k = static_cast<int>(op);
  return k >= 0 && k < kAugmentOps ? kAugmentOpNames[k] : "?";
}

at::Tensor apply_augment_ops(const at::Tensor& images, const std::vector<OpDraw>& ops) {
  if (images.scalar_type() != at::kByte || images.dim() != 4 ||
      (images.size(1) != 1 && images.size(1) != 3) ||
      static_cast<int64_t>(ops.size()) != images.size(0))
    throw Error(
        "automatic augmentation needs uint8 images (N, C, H, W) with 1 or 3 channels and one op "
        "per image "
        "(internal error)");
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  // Groups by op, the five affine ops in one (ShearX's): each image's matrix is its own op's, and
  // the grid and the sampling treat every image alike.
  std::array<std::vector<int64_t>, kAugmentOps> groups;
  for (int64_t i = 0; i < n; ++i) {
    const AugmentOp op = ops[static_cast<size_t>(i)].op;
    const auto k = static_cast<int>(is_affine_op(op) ? AugmentOp::kShearX : op);
    if (k < 0 || k >= kAugmentOps)
      throw Error("unknown augmentation op " + std::to_string(k) + " (internal error)");
    groups[static_cast<size_t>(k)].push_back(i);
  }
  const int64_t changed = n - static_cast<int64_t>(groups[0].size());
  if (changed == 0) return images;
  // Every group's image indices and parameters, in group order: one copy each to the device.
  at::Tensor order = at::empty({changed}, at::kLong);
  at::Tensor params = at::zeros({changed, kOpParams}, at::kFloat);
  int64_t* order_p = order.data_ptr<int64_t>();
  float* params_p = params.data_ptr<float>();
  int64_t k = 0;
  for (size_t g = 1; g < groups.size(); ++g)
    for (const int64_t i : groups[g]) {
      order_p[k] = i;
      fill_params(ops[static_cast<size_t>(i)], h, w, params_p + k * kOpParams);
      ++k;
    }
  const at::Tensor order_d = order.to(images.device());
  const at::Tensor params_d = params.to(images.device());
  at::Tensor out;
  int64_t first = 0;
  for (size_t g = 1; g < groups.size(); ++g) {
    const auto count = static_cast<int64_t>(groups[g].size());
    if (count == 0) continue;
    const at::Tensor p = params_d.narrow(0, first, count);
    if (count == n) {  // the whole batch takes this op
      const at::Tensor r = apply_group(static_cast<AugmentOp>(g), images, p);
      return r.defined() ? r : images;
    }
    const at::Tensor idx = order_d.narrow(0, first, count);
    const at::Tensor r = apply_group(static_cast<AugmentOp>(g), images.index_select(0, idx), p);
    first += count;
    if (!r.defined()) continue;
    if (!out.defined()) out = images.clone();
    out.index_copy_(0, idx, r);
  }
  return out.defined() ? out : images;
}

at::Tensor apply_augment(const at::Tensor& images, const std::vector<std::vector<OpDraw>>& ops) {
  size_t rounds = 0;
  for (const auto& o : ops) rounds = std::max(rounds, o.size());
  at::Tensor out = images;
  std::vector<OpDraw> round(ops.size());
  for (size_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < ops.size(); ++i) round[i] = r < ops[i].size() ? ops[i][r] : OpDraw{};
    out = apply_augment_ops(out, round);
  }
  return out;
}

void erase_boxes_(at::Tensor& images, const at::Tensor& boxes) {
  if (!images.is_floating_point() || images.dim() != 4 || boxes.scalar_type() != at::kLong ||
      boxes.dim() != 2 || boxes.size(0) != images.size(0) || boxes.size(1) != 4 ||
      boxes.device() != images.device())
    throw Error(
        "erasing needs floating images (N, C, H, W) and (N, 4) int64 boxes on their device "
        "(internal error)");
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const auto lopts = boxes.options();
  auto column = [&](int64_t k) { return boxes.select(1, k).reshape({n, 1, 1, 1}); };
  const at::Tensor top = column(0), left = column(1);
  const at::Tensor rows = at::arange(h, lopts).view({1, 1, h, 1});
  const at::Tensor cols = at::arange(w, lopts).view({1, 1, 1, w});
  // F.erase: img[..., top : top + height, left : left + width] = 0
  const at::Tensor in_rows = (rows >= top).logical_and_(rows < top + column(2));
  const at::Tensor in_cols = (cols >= left).logical_and_(cols < left + column(3));
  images.masked_fill_(in_rows.logical_and(in_cols), 0);
}

}  // namespace dtrain::detail
