// preprocess.json: how a run turned raw data into the model's inputs and labels, as JSON that
// Python reads without dtrain (json.load), written beside model.pt (hooks/model_file.cpp) and
// checked by `dtrain eval` (cli/eval.cpp). Its fields, each present only where it applies:
//   format, input_shape (one sample), input_dtype ("float32" or "int64"), task
//   ("classification" or "regression"), num_classes, target_dim, class_names (the name of label
//   i: image folders' class folders; idx, cifar, csv: data.class_names, or CIFAR's label-name
//   file);
//   features {names, mean, std}: csv, x' = (x - mean[j]) / std[j] per feature column j, with
//     the train rows' statistics (mean and std null when data.normalize is off); targets: the
//     csv target columns;
//   pixels {scale, mean, std}: images (idx, cifar, image folders, synthetic uint8 images),
//     x' = (x / scale - mean[c]) / std[c] per channel c, x the stored 0..255 value; idx has one
//     channel;
//   eval_transform {resize, center_crop, interpolation}: image folders' evaluation images,
//     shorter side resized to `resize` (PIL's bilinear), then the center crop;
//   tokens {vocab_size, seq_len}: token and text data (inputs are token ids).
// The same config and data give the same text, byte for byte. `dtrain predict` (cli/predict.cpp)
// builds its model and preprocesses its inputs from the file alone (read_preprocess()).
#pragma once

#include <string>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"

namespace dtrain::detail {

// The file's text for data described by `spec` (the training split's) under `cfg`.
std::string preprocess_json(const DataSpec& spec, const DataConfig& cfg);

// Compares a preprocess.json's text (read from `path`) with what `spec` and `cfg` give now:
// "" when they agree (fractions within 1e-6 of each other, relative, count as equal: statistics
// recomputed from the same data), else one line naming the first field that differs, both values
// and the config key(s) that set it. Text that is not such a JSON object is a dtrain::Error naming
// `path`.
std::string preprocess_difference(const std::string& text, const std::string& path,
                                  const DataSpec& spec, const DataConfig& cfg);

// A preprocess.json read back: the data.format it was written for and the DataSpec the run's
// model was built from: input_shape, input_dtype, num_classes or target_dim; pixels' mean and
// std as pixel_mean and pixel_std (images standardized on the device: image folders, cifar,
// synthetic uint8 images), except for idx, whose single mean and std go to recipe.mean and
// recipe.std (standardized on the host, (x / 255 - mean) / std); recipe: the feature and target
// names, their mean and std (empty when data.normalize was off), class names, eval_transform's
// resize. A field missing or of the wrong type, sizes that are not positive or do not agree
// (input_shape, num_classes, the names, means and stds), or text that is not JSON, is a
// dtrain::Error naming `path` and the field.
struct RunRecipe {
  DataFormat format = DataFormat::kIdx;
  DataSpec spec;
};
RunRecipe read_preprocess(const std::string& text, const std::string& path);

}  // namespace dtrain::detail
