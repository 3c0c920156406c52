// The operations of torchvision's automatic augmentation (torchvision 0.14,
// transforms.autoaugment._apply_op with InterpolationMode.NEAREST and fill None) on batches of
// uint8 images (N, C, H, W), C = 1 or 3, as ATen operations on the images' device (CPU or CUDA),
// each image with its own op and magnitude. Each op computes what torchvision's tensor functions
// (transforms.functional_tensor) compute on one uint8 image (C, H, W), step for step:
//   ShearX, ShearY, TranslateX, TranslateY, Rotate: F.affine / F.rotate: the inverse affine matrix
//     (_get_inverse_affine_matrix, in double, with _apply_op's centers: the image's top-left
//     corner for the shears, its middle otherwise), as float32 through _gen_affine_grid's grid
//     (linspace, the matrix rescaled by half the size, bmm), grid_sample nearest with zeros
//     outside and align_corners false on the float image, rounded back to uint8;
//   Brightness, Color, Contrast, Sharpness: F.adjust_brightness / adjust_saturation /
//     adjust_contrast / adjust_sharpness with factor 1 + magnitude: _blend's ratio * img +
//     (1 - ratio) * other in float32, clamped to [0, 255] and truncated; the other image is
//     black, rgb_to_grayscale (0.2989 r + 0.587 g + 0.114 b, truncated; Color leaves 1 channel
//     unchanged), the grayscale's mean, or the 3x3 blur (weights 1 and 5 in the middle, / 13,
//     rounded; the border rows and columns kept; images of 2 rows or columns or fewer unchanged);
//   Posterize: F.posterize(img, int(magnitude)): img & -(2^(8 - bits));
//   Solarize: F.solarize(img, magnitude): 255 - img where float(img) >= float(magnitude);
//   AutoContrast: F.autocontrast: each channel mapped from [min, max] to [0, 255] (scale
//     255 * (1 / (max - min)) in float32, truncated; a constant channel unchanged);
//   Equalize: F.equalize: each channel's 256-bin histogram, step = (pixels - the count of the
//     highest value present) // 255, lut[v] = (cumsum[v - 1] + step // 2) // step, clamped to
//     [0, 255], lut[0] = 0; unchanged where step is 0;
//   Invert: F.invert (AutoAugment's ImageNet policy uses it): 255 - img;
//   Identity: unchanged.
// The batch runs few kernels: its images grouped by op on the host (the five affine ops in one
// group, each image with its own matrix), each group gathered (index_select), transformed at once
// with its per-image parameters (one small host-to-device copy of all of them per call), and
// written back (index_copy_). On the CPU the pixels equal
// torchvision's on each image alone, byte for byte (tests/unit/test_auto_augment.cpp): the grid
// is computed by the same calls in the same layouts, since nearest sampling turns a last-bit
// difference at a point halfway between two pixels (rotations by 90 degrees have whole rows of
// them) into the other pixel; the sums behind Contrast's mean are exact for images of up to
// 65,793 pixels, beyond which float32's summation order may move a pixel by one level. On a CUDA
// device the grid's bmm and the blur's convolution are CUDA's (as torchvision's are there), so
// such halfway points may fall the other way.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace dtrain::detail {

enum class AugmentOp : int8_t {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert
};
constexpr int kAugmentOps = 15;

// torchvision's name of an op ("ShearX"), as _apply_op takes it.
const char* augment_op_name(AugmentOp op);

// One op on one image: `magnitude` as torchvision's forward hands it to _apply_op (signed where
// the op space is; a shear's tangent, a translation's pixels, a rotation's degrees
// counter-clockwise, a color op's factor - 1, posterize's bits, solarize's threshold; unused by
// AutoContrast, Equalize, Invert and Identity).
struct OpDraw {
  AugmentOp op = AugmentOp::kIdentity;
  double magnitude = 0;
};

// `ops[i]` applied to image i of `images`, uint8 (N, C, H, W) with C = 1 or 3, on its device:
// a new tensor (the input when every op is Identity). Magnitudes torchvision refuses are an
// Error: a color factor below 0, posterize's bits outside 0..8, a threshold above 255.
at::Tensor apply_augment_ops(const at::Tensor& images, const std::vector<OpDraw>& ops);

// Each image's ops in turn, as torchvision's forward applies them one after another:
// round r applies ops[i][r] to image i (Identity where image i has fewer ops).
at::Tensor apply_augment(const at::Tensor& images, const std::vector<std::vector<OpDraw>>& ops);

// RandomErasing's erase with value 0 (F.erase(img, i, j, h, w, 0) on each image), in place on a
// floating (N, C, H, W) tensor: `boxes` (N, 4) int64 on the images' device, rows (top, left,
// height, width); a box of height or width 0 erases nothing. Comparisons of row and column
// indices against each image's box: device operations only, no host synchronization, so a CUDA
// graph may capture it.
void erase_boxes_(at::Tensor& images, const at::Tensor& boxes);

}  // namespace dtrain::detail
