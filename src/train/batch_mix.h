// Note [batch mixing]: the image recipe's batch-level augmentation, applied on the device to each
// rank's whole batch of standardized images before it is split into micro-batches (so the
// accumulated step sees the same mixed batch as one pass would), in this order:
//   RandomErasing (data.random_erase): each image's own box set to 0, torchvision's
//     RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0) after Normalize;
//   Mixup or CutMix (train.mixup_alpha, train.cutmix_alpha): the batch paired with itself rolled
//     by one (image i with image i - 1), torchvision's reference RandomMixup / RandomCutmix: the
//     inputs x lambda + rolled x (1 - lambda), or the rolled batch's box pasted in, and the
//     one-hot targets mixed alike, into soft targets for the loss (train/loss.h).
// The draws are made on the host, per step, from a stream keyed by (run.seed, epoch, step, rank):
// the same run draws the same, and a resumed run continues them exactly (the step says where).
// They reach the device as a small parameter tensor that the step's operations read, so the same
// operations run at every step and a CUDA graph captures them (train/graph_step.h); the erase
// boxes likewise, one row per image. On N ranks each rank mixes its own batch, as DDP with
// torchvision's collate function does: a run with mixing is not the same on N ranks as on one.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "dtrain/config.h"

namespace dtrain::detail {

class SampleRandom;

// One batch's Mixup or CutMix. `lambda` is the Beta(alpha, alpha) draw; for CutMix the box is
// rows [y1, y2) and columns [x1, x2), and `target_lambda` the share of the image outside it
// (torchvision's lambda after the box); for Mixup target_lambda = lambda. kNone: unmixed.
struct MixDraw {
  enum class Kind { kNone, kMixup, kCutmix } kind = Kind::kNone;
  double lambda = 1.0;
  double target_lambda = 1.0;
  int64_t y1 = 0, y2 = 0, x1 = 0, x2 = 0;
};

// Beta(alpha, alpha) from `random` (Marsaglia and Tsang's gamma draws, Gamma(a) = Gamma(a + 1)
// U^(1/a) below 1); alpha > 0.
double beta_draw(double alpha, SampleRandom& random);
// RandomCutmix's box of an image of `height` x `width` for `lambda` and the centre (r_y, r_x):
// half-sides int(0.5 sqrt(1 - lambda) side), clamped to the image, and the lambda it gives.
MixDraw cutmix_box(double lambda, int64_t r_y, int64_t r_x, int64_t height, int64_t width);

struct MixOptions {
  double mixup_alpha = 0, cutmix_alpha = 0, cutmix_prob = 0.5, mix_prob = 1.0;
  double random_erase = 0;
  int64_t num_classes = 0;
  uint64_t seed = 0;
  bool any() const { return mixup_alpha > 0 || cutmix_alpha > 0 || random_erase > 0; }
  bool mixes() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
};
MixOptions mix_options(const Config& cfg, int64_t num_classes);
class BatchMix;
// The run's batch mixing, or null when data.random_erase, train.mixup_alpha and
// train.cutmix_alpha are all off.
std::unique_ptr<BatchMix> make_batch_mix(const Config& cfg, int64_t num_classes,
                                         const at::Device& device, int rank);

class BatchMix {
 public:
  BatchMix(const MixOptions& options, const at::Device& device, int rank);

  // This step's draws for a batch of images (N, C, H, W): the mix (mix_prob, then CutMix with
  // cutmix_prob when both are on, then lambda and the box), then each image's erase box; written
  // to the device tensors that apply() reads (asynchronously, from pinned memory). The same
  // (epoch, step) draws the same: a step redone after running out of memory mixes alike.
  void draw(int64_t epoch, int64_t step, const at::Tensor& inputs);
  const MixDraw& last() const { return last_; }

  // Standardized float images (N, C, H, W) and class ids (N,) -> erased and mixed images (fp32,
  // the inputs' memory format) and soft targets (N, num_classes) fp32 (one-hot when unmixed).
  // N must be the images of the last draw(). Device operations only: capturable.
  std::pair<at::Tensor, at::Tensor> apply(const at::Tensor& images,
                                          const at::Tensor& targets) const;

  // The same for a draw given here (tests): `erase` (N, 4) rows of (top, left, height, width).
  static std::pair<at::Tensor, at::Tensor> mix(const at::Tensor& images, const at::Tensor& targets,
                                               int64_t num_classes, const MixDraw& draw,
                                               const at::Tensor& erase = {});

 private:
  static at::Tensor parameters(const MixDraw& d);
  static std::pair<at::Tensor, at::Tensor> mix_with(const at::Tensor& images,
                                                    const at::Tensor& targets, int64_t num_classes,
                                                    const at::Tensor& params,
                                                    const at::Tensor& erase, bool erasing,
                                                    bool mixing);
  MixOptions options_;
  at::Device device_;
  int rank_;
  MixDraw last_;
  at::Tensor params_;  // (10,) fp32 on the device: see parameters()
  at::Tensor erase_;   // (N, 4) int64 on the device
};

}  // namespace dtrain::detail
