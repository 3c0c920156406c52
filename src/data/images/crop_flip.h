// A training split of in-memory uint8 images (N, C, H, W), each image moved at random with zeros
// shifted in and mirrored at random as it is drawn: torchvision's RandomCrop((H, W), padding, fill
// 0) then RandomHorizontalFlip(0.5) (Note [cifar augmentation] in crop_flip.cpp).
// Invariant: a sample's pixels depend on (seed, epoch, sample index) alone, not on the batch it
// is in, the loader thread, the rank or the number of ranks.
#pragma once

#include <cstdint>
#include <memory>

#include "data/images/auto_augment.h"
#include "dtrain/data/dataset.h"

namespace dtrain::detail {

// `images` augmented: `padding` > 0 moves each image by up to that many pixels each way, `hflip`
// mirrors half of them, then `augment` (data.auto_augment) changes each; the labels and the spec
// are the images'.
std::shared_ptr<Dataset> random_crop_flip(std::shared_ptr<TensorDataset> images, int64_t padding,
                                          bool hflip, uint64_t seed, BatchAugment augment = {});

}  // namespace dtrain::detail
