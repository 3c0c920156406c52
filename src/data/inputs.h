// `dtrain predict`'s inputs (cli/predict.cpp): files named on the command line, preprocessed as
// the run's evaluation split was, from the run's DataSpec as preprocess.json records it
// (read_preprocess(), data/preprocess.h), without the training data. Each is a Dataset whose
// get() returns the inputs the run's model takes, in input order (targets: zeros, not read), with
// one name per sample for the output. Every failure is a dtrain::Error naming the file (and the
// line, or the image's index).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtrain/data/dataset.h"

namespace dtrain::detail {

struct PredictInputs {
  std::shared_ptr<Dataset> data;
  // Per sample: its file (images), "file:line" (CSV rows), "file[i]" (IDX images).
  std::vector<std::string> names;
};

// image_folder (image_folder.cpp): `path` is one image file (JPEG or PNG by its first bytes,
// whatever its name), or a folder: the .jpg, .jpeg and .png files under it (subfolders too,
// symbolic links followed), sorted by path; other files are skipped, and a folder without an
// image is an Error naming it. Each image is decoded and transformed as the run's evaluation
// images (Note [image transforms]): Resize(spec.recipe.resize), CenterCrop(spec.input_shape[2]),
// with data.scaled_decode's JPEG shrinking when `scaled_decode`; inputs uint8 (N, 3, S, S), which
// the caller standardizes with spec.pixel_mean / pixel_std (PixelNormalizer, data/pixels.h). A
// file that does not decode is an Error naming it when its batch is read.
PredictInputs image_file_inputs(const std::string& path, const DataSpec& spec, bool scaled_decode);

// csv (inputs.cpp): the data rows of one CSV file (csv_table.h's syntax) whose header holds every
// one of spec.recipe.feature_names, in any order; other columns (the target, an id) are not read.
// Features float (N, F) in the recipe's order, standardized with recipe.mean / recipe.std when
// the run standardized them. A missing column is an Error naming the file and the column.
PredictInputs csv_inputs(const std::string& path, const DataSpec& spec);

// idx (inputs.cpp): the images of one IDX file of uint8 (N, H, W) images, H x W those of
// spec.input_shape ({1, H, W}); inputs float (N, 1, H, W), x / 255 standardized with
// recipe.mean / recipe.std as the run's training images were.
PredictInputs idx_inputs(const std::string& path, const DataSpec& spec);

}  // namespace dtrain::detail
