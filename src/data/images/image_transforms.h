// torchvision's image transforms on uint8 pixels, their random draws keyed by (seed, epoch,
// sample index). data.format image_folder (Note [image transforms] in image_folder.cpp) computes
// its defaults as torchvision does on PIL images:
//   training:   RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(0.5)
//   evaluation: Resize(shorter side) + CenterCrop(size)
// and CIFAR's training images (Note [cifar augmentation] in crop_flip.cpp) take
//   RandomCrop(size of the image, padding, fill 0) + RandomHorizontalFlip(0.5).
// The crop geometry follows torchvision's code step for step (its rounding included); the
// resampling is PIL's bilinear filter (Image.resize(..., BILINEAR)): a triangle whose support
// widens with the shrink factor (antialiased), fixed-point with PIL's precision and rounding, a
// horizontal pass then a vertical one. On the same decoded pixels and the same crop the output
// equals PIL's, byte for byte.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace dtrain::detail {

// One sample's random draws: a splitmix64 stream keyed by (seed, epoch, sample index), the same
// whatever thread or rank draws it.
class SampleRandom {
 public:
  SampleRandom(uint64_t seed, int64_t epoch, int64_t index);
  uint64_t next();
  double uniform(double lo, double hi);  // [lo, hi)
  int64_t below(int64_t n);              // [0, n), n >= 1
 private:
  uint64_t state_;
};

// RandomHorizontalFlip(0.5)'s draw: torch.rand(1) < 0.5.
bool random_flip(SampleRandom& random);

// A region of an image in pixels: torchvision's (i, j, h, w).
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// RandomCrop(size, padding) of an image of that size: the image padded by `padding` pixels of
// value 0 on every side, a crop of the image's size placed uniformly in it (RandomCrop.get_params:
// top, then left, each in [0, 2 padding]), then mirrored left to right when `flip`. The output is
// the input moved right by dx and down by dy, each in [-padding, padding], zeros shifted in.
struct PadCrop {
  int64_t dx = 0, dy = 0;
  bool flip = false;
};
// The crop's draws (top, then left) and, with `hflip`, random_flip's.
PadCrop random_pad_crop(int64_t padding, bool hflip, SampleRandom& random);
// `planes` planes of height x width pixels, row-major, from `in` into `out` (not overlapping):
// out(c, y, x) = in(c, y - dy, x' - dx), x' = width - 1 - x when flipping, else x; 0 where that
// falls outside the image (torchvision pads with fill 0 before any normalization).
void pad_crop(const uint8_t* in, int64_t planes, int64_t height, int64_t width, const PadCrop& p,
              uint8_t* out);

// RandomResizedCrop.get_params: up to 10 draws of an area share in [scale[0], scale[1]) and a
// log-uniform aspect ratio in [ratio[0], ratio[1]); the first crop that fits the image is placed
// uniformly; if none fits, the largest centered crop whose aspect ratio is clamped into `ratio`.
CropBox random_resized_crop(int64_t width, int64_t height, const std::vector<double>& scale,
                            const std::vector<double>& ratio, SampleRandom& random);

// Resize(resize) then CenterCrop(size) of a width x height image: the resized image's size
// (shorter side = resize, the longer int(resize * longer / shorter)) and where the crop lies in it
// (torchvision: int(round((resized - size) / 2.0)), Python's round: halves to even).
struct CenterCrop {
  int64_t resized_width = 0, resized_height = 0;
  CropBox crop;
};
CenterCrop resize_center_crop(int64_t width, int64_t height, int64_t resize, int64_t size);

// Interleaved RGB pixels: `height` rows of `width` pixels, `stride` bytes apart.
struct RgbView {
  const uint8_t* data = nullptr;
  int64_t width = 0, height = 0, stride = 0;
  RgbView sub(const CropBox& b) const {  // the region b of this view
    return RgbView{data + b.top * stride + b.left * 3, b.width, b.height, stride};
  }
};

// A rectangle of source pixels in (fractional) pixel coordinates: [x0, x1) x [y0, y1).
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// PIL's bilinear coefficients along one axis (Resample.c's precompute_coeffs and
// normalize_coeffs_8bpc): output index o (of out_first ... out_first + count - 1 of an axis of
// out_size) is the sum over taps x < count[o] of weights[o * ksize + x] * source[first[o] + x],
// the weights in 22-bit fixed point, plus a half, shifted right and clipped to 0..255. Both the
// CPU's Resampler and the GPU's kernels (data.decode: gpu, src/data/gpu_decode.h) apply these.
struct ResampleTaps {
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;
  int64_t ksize = 0;
  bool fixed = false;     // every count is ksize (the source holds ksize pixels)
  bool identity = false;  // output index o is source index o + offset: no filtering
  int64_t offset = 0;
};
// The taps for output indices [out_first, out_first + out_count) of out_size resampling
// [in0, in1) of a source axis of in_size pixels; `fixed`: padded to ksize taps each where the
// source allows (ResampleTaps::fixed). A source and an output of the same size without a box is
// the identity (no taps).
void plan_taps(ResampleTaps& t, int64_t in_size, double in0, double in1, int64_t out_size,
               int64_t out_first, int64_t out_count, bool fixed);
// The source indices the taps read: [first, end) (the identity's: offset .. offset + count).
std::pair<int64_t, int64_t> taps_span(const ResampleTaps& t, int64_t out_count);
// The identity as taps: one tap of weight 1.0 each, source index o + offset (what the GPU's
// kernels apply where the CPU copies).
void unit_taps(ResampleTaps& t, int64_t out_count);
// PIL's 1.0 in the taps' fixed point.
constexpr int32_t kResampleOne = 1 << 22;

// How one sample's pixels come out of a decoded image: PIL's img.crop(region).resize((grid_width,
// grid_height), BILINEAR, box) with `box` in the region's coordinates, of which only `window` is
// kept, mirrored left to right when `flip`. `region` is whole pixels inside the image (the
// filter never reads outside it); `box` may be fractional (a crop mapped into a scaled decode).
// The CPU's Resampler and the GPU's decoder (gpu_jpeg, src/data/gpu_decode.h) take it whole.
struct ResamplePlan {
  CropBox region;
  Box box;
  int64_t grid_width = 0, grid_height = 0;
  CropBox window;
  bool flip = false;
};

// PIL's bilinear resampling (ResamplePlan) of `image`: plan.box of image.sub(plan.region) onto a
// grid_width x grid_height image (PIL's src.resize((grid_width, grid_height), BILINEAR, box));
// the filter never reads outside the region, so PIL's img.crop(c).resize(...) is a region c
// with the whole of it as the box. Only plan.window of the result is computed; it is written
// into `planes`: 3 planes (R, G, B) of window.height x window.width, row-major, mirrored left to
// right when plan.flip. Holds its scratch buffers and coefficients across calls: one per thread.
class Resampler {
 public:
  void run(const RgbView& image, const ResamplePlan& plan, uint8_t* planes);

 private:
  ResampleTaps h_, v_;
  std::vector<uint8_t> rows_;  // the horizontal pass's output rows, interleaved
  std::vector<int32_t> acc_;
};

}  // namespace dtrain::detail
