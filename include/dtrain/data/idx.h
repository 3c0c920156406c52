// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
// Invariant: a file whose header, dimensions or length do not agree is rejected with an error
// naming the file and what is wrong; nothing is guessed.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "dtrain/data/dataset.h"

namespace dtrain {

// Read a whole IDX file (".gz" is detected by magic bytes, not by name) into a CPU tensor of the
// stored element type (uint8 -> kByte, int8 -> kChar, int16 -> kShort, int32 -> kInt,
// float32 -> kFloat, float64 -> kDouble), shaped by the header's dimensions (big-endian).
at::Tensor read_idx(const std::string& path);

// Images (N, H, W) uint8 + labels (N,) uint8 -> inputs (N, 1, H, W) float in [0, 1] (optionally
// standardized with the training split's mean and std), targets (N,) int64; spec().num_classes is
// the largest label + 1 (make_datasets() applies data.num_classes and checks every label).
std::shared_ptr<TensorDataset> load_idx_classification(const std::string& images_path,
                                                       const std::string& labels_path,
                                                       bool normalize, double mean = 0.0,
                                                       double std = 1.0);

}  // namespace dtrain
