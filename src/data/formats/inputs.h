// `dtrain predict`'s inputs (cli/predict.cpp): files named on the command line, preprocessed as
// the run's evaluation split was, from the run's DataSpec as preprocess.json records it
// (read_preprocess(), data/preprocess.h), without the training data. Each is a Dataset whose
// get() returns the inputs the run's model takes, in input order (targets: zeros, not read), with
// one name per sample for the output. Every failure is a dtrain::Error naming the file (and the
// line, or the image's index).
#pragma once

#include <ATen/ATen.h>

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
// whatever its name), or a folder (image_input_files()). Each image is decoded and transformed
// as the run's evaluation images (Note [image transforms]): Resize(spec.recipe.resize),
// CenterCrop(spec.input_shape[2]), with data.scaled_decode's JPEG shrinking when
// `scaled_decode`; inputs uint8 (N, 3, S, S), which the caller standardizes with
// spec.pixel_mean / pixel_std (PixelNormalizer, data/pixels.h). A file that does not decode is
// an Error naming it when its batch is read.
PredictInputs image_file_inputs(const std::string& path, const DataSpec& spec, bool scaled_decode);

// csv (inputs.cpp): the data rows of one CSV file (csv_table.h's syntax) whose header holds every
// one of spec.recipe.feature_names, in any order; other columns (the target, an id) are not read.
// Features float (N, F) in the recipe's order, standardized with recipe.mean / recipe.std when
// the run standardized them. A missing column is an Error naming the file and the column.
PredictInputs csv_inputs(const std::string& path, const DataSpec& spec);

// idx (inputs.cpp): the images of one IDX file of uint8 (N, H, W) images, H x W those of
// spec.input_shape ({1, H, W}); inputs float (N, 1, H, W), x / 255 standardized with
// recipe.mean / recipe.std as the run's training images were (idx_standardized). A folder, or a
// file that opens as a PNG or JPEG (its first bytes, whatever its name), is picture_inputs'.
// A file that is neither is an Error naming it that says what predict reads.
PredictInputs idx_inputs(const std::string& path, const DataSpec& spec);

// The inputs of an idx run from uint8 pixels (N, 1, H, W): x / 255, then (x - mean) / std with
// recipe.mean / recipe.std (none: as they are), in float32 as load_idx_classification (idx.cpp)
// prepares the training images, so that equal pixels give equal inputs.
at::Tensor idx_standardized(const at::Tensor& pixels, const InputRecipe& recipe);

// idx, cifar10, cifar100 (pictures.cpp): PNG and JPEG pictures of any size for a run trained on
// images of one size, spec.input_shape {C, H, W} with C 1 (gray) or 3 (RGB). `path` is one
// picture, or a folder as image_input_files() lists it. Each picture is decoded as PIL's
// Image.open(f).convert("RGB") (image_codec.h), made gray for C 1 with PIL's convert("L") (ITU-R
// 601-2 luma in PIL's fixed point: (19595 R + 38470 G + 7471 B + 32768) >> 16), then resized whole
// to W x H, the aspect ratio not kept, as PIL's im.resize((W, H), Image.BILINEAR) does
// (Resampler, image_transforms.h; a picture of the run's size is left as it is). Inputs: C 1,
// float (N, 1, H, W) from idx_standardized(); C 3, uint8 (N, 3, H, W), which the caller
// standardizes with spec.pixel_mean / pixel_std (PixelNormalizer) as the training images were.
// A file that does not decode is an Error naming it when its batch is read.
PredictInputs picture_inputs(const std::string& path, const DataSpec& spec);

// The files `path` names (image_folder.cpp): the file itself, whatever its name, or a folder's
// .jpg, .jpeg and .png files (subfolders too, symbolic links followed), sorted by path, other
// files skipped. A missing path, or a folder without an image, is an Error naming it and --input.
std::vector<std::string> image_input_files(const std::string& path);

}  // namespace dtrain::detail
