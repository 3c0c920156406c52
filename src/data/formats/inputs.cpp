// `dtrain predict`'s CSV rows and IDX images (inputs.h); its image files are image_folder.cpp's
// and pictures.cpp's.
#include "data/formats/inputs.h"

#include <ATen/ATen.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "data/files.h"
#include "data/formats/csv_table.h"
#include "data/images/image_codec.h"
#include "dtrain/data/idx.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

void check_file(const std::string& path) {
  if (!is_regular_file(path)) throw Error("no such file: " + path, "--input");
}

// Whether the file's first bytes are a PNG's or a JPEG's (a file that cannot be read: no).
bool starts_as_image(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t head[8] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  return is_image(head, static_cast<size_t>(in.gcount()));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

}  // namespace

PredictInputs csv_inputs(const std::string& path, const DataSpec& spec) {
  check_file(path);
  const InputRecipe& r = spec.recipe;
  if (r.feature_names.empty())
    throw Error("the run's preprocess.json names no feature columns", "--input");
  CsvColumns columns;
  columns.features = r.feature_names;
  columns.targets_required = false;
  columns.features_key = "--input";
  const CsvTable t = read_csv({path}, columns, "--input");
  const auto n = t.rows();
  const auto f = static_cast<int64_t>(t.features.size());
  at::Tensor x = at::empty({n, f}, at::kFloat);
  float* p = x.data_ptr<float>();
  const bool standardize = !r.mean.empty();
  if (standardize && (r.mean.size() != t.features.size() || r.std.size() != t.features.size()))
    throw Error("the run's preprocess.json has " + std::to_string(r.mean.size()) + " means and " +
                    std::to_string(r.std.size()) + " stds for " + std::to_string(f) +
                    " feature columns",
                "--input");
  // As csv.cpp standardizes the training rows: the float value, in double, back to float.
  for (int64_t i = 0; i < n * f; ++i) {
    const auto j = static_cast<size_t>(i % f);
    p[i] = standardize ? static_cast<float>((t.x[static_cast<size_t>(i)] - r.mean[j]) / r.std[j])
                       : t.x[static_cast<size_t>(i)];
  }
  PredictInputs out;
  for (int64_t i = 0; i < n; ++i) out.names.push_back(t.where(i));
  DataSpec s = spec;
  s.pixel_mean.clear(), s.pixel_std.clear();
  out.data = std::make_shared<TensorDataset>(
      std::move(x), at::zeros({n}, at::kLong), s,
      format("%lld rows of %s", static_cast<long long>(n), path.c_str()));
  return out;
}

at::Tensor idx_standardized(const at::Tensor& pixels, const InputRecipe& recipe) {
  // As load_idx_classification (idx.cpp) prepares the run's images.
  at::Tensor inputs = pixels.to(at::kFloat).div_(255.0);
  if (!recipe.mean.empty() && !recipe.std.empty()) inputs.sub_(recipe.mean[0]).div_(recipe.std[0]);
  return inputs;
}

PredictInputs idx_inputs(const std::string& path, const DataSpec& spec) {
  if (is_directory(path) || starts_as_image(path)) return picture_inputs(path, spec);
  check_file(path);
  at::Tensor images;
  try {
    images = read_idx(path);
  } catch (const Error& e) {
    if (e.cause().rfind("not an IDX file", 0) != 0) throw;
    throw Error(
        e.cause() +
            " (for a model trained on IDX images, predict reads IDX image files and PNG or JPEG "
            "pictures: a file, or a folder of them)",
        e.where());
  }
  const std::vector<int64_t>& shape = spec.input_shape;
  if (shape.size() != 3 || shape[0] != 1)
    throw Error("the run's input_shape is not that of IDX images", "--input");
  if (images.scalar_type() != at::kByte || images.dim() != 3 || images.size(1) != shape[1] ||
      images.size(2) != shape[2])
    throw Error("expected uint8 images of " + shape_text({shape[1], shape[2]}) +
                    " pixels (the run's input_shape " + shape_text(shape) +
                    "), got an IDX file of " + shape_text(images.sizes().vec()) + " " +
                    std::string(c10::toString(images.scalar_type())),
                path);
  const int64_t n = images.size(0);
  at::Tensor inputs = idx_standardized(images.reshape({n, 1, shape[1], shape[2]}), spec.recipe);
  PredictInputs out;
  for (int64_t i = 0; i < n; ++i) out.names.push_back(path + "[" + std::to_string(i) + "]");
  out.data = std::make_shared<TensorDataset>(
      std::move(inputs), at::zeros({n}, at::kLong), spec,
      format("%lld images of %s", static_cast<long long>(n), path.c_str()));
  return out;
}

}  // namespace dtrain::detail
