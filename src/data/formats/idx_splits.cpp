// data.format idx: the train and test splits from IDX files (Fashion-MNIST's layout), the train
// split's mean and std standardizing both, the classes named by data.class_names (IDX files
// carry no names); for `dtrain eval`, the test split alone with a run's recorded mean and std.
// Registered as data.format idx (Note [data formats]).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/files.h"
#include "data/formats/registry.h"
#include "data/labels.h"
#include "data/pixels.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/data/idx.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

// Every label of `targets` (N,) int64 must lie in the label space; the first that does not is an
// Error naming the file, the sample index and the value.
void check_labels(const at::Tensor& targets, const LabelSpace& space, const std::string& path) {
  int64_t count = 0;
  const int64_t index = first_bad_label(targets, space.classes, &count);
  if (index < 0) return;
  throw Error(
      label_error(targets[index].item<int64_t>(), "sample " + std::to_string(index), count, space),
      path);
}

}  // namespace

Splits make_idx_splits(const DataConfig& cfg) {
  const std::string train_images = data_file(cfg, cfg.train_images, "data.train_images");
  const std::string train_labels = data_file(cfg, cfg.train_labels, "data.train_labels");
  const bool has_test = !(cfg.test_images.empty() && cfg.test_labels.empty());
  std::string test_images, test_labels;
  if (has_test) {
    test_images = data_file(cfg, cfg.test_images, "data.test_images");
    test_labels = data_file(cfg, cfg.test_labels, "data.test_labels");
  }

  Splits out;
  auto train = load_idx_classification(train_images, train_labels, /*normalize=*/false);
  // An empty split is said as such, before the statistics or the label space read it.
  if (train->size() == 0)
    throw Error(
        "the training split is empty: the file holds 0 images (a run needs at least one "
        "global batch of samples)",
        train_images);
  double mean = 0.0, stdev = 1.0;
  if (cfg.normalize) {
    // Population mean and std of the train split's pixels (values in [0, 1]), exact from the
    // stored 0..255 values (inputs are v / 255 in float: v * 255 rounds back to v): the same on
    // any number of threads and ranks.
    const at::Tensor& x = train->inputs();
    if (x.numel() == 0) throw Error("cannot standardize an empty train split", "data.normalize");
    const auto stats = pixel_statistics(x.mul(255).round_().to(at::kByte));
    mean = stats.first[0];
    stdev = stats.second[0];
    if (!(stdev > 1e-12)) {
      throw Error("train images have zero variance; cannot standardize (set data.normalize=false)",
                  "data.normalize");
    }
    train->inputs().sub_(mean).div_(stdev);
    std::ostringstream d;
    d << train->describe() << ", standardized with train mean " << mean << " std " << stdev;
    train =
        std::make_shared<TensorDataset>(train->inputs(), train->targets(), train->spec(), d.str());
  }
  // The label space: data.num_classes, or the train labels' largest + 1; every label inside it.
  DataSpec spec = train->spec();
  const LabelSpace space = label_space(cfg, spec.num_classes,
                                       "taken from the train labels (largest + 1, as "
                                       "data.num_classes is 0); set data.num_classes to "
                                       "cover every label");
  spec.num_classes = space.classes;
  spec.recipe.class_names = class_names(cfg, space);
  if (cfg.normalize) spec.recipe.mean = {mean}, spec.recipe.std = {stdev};
  check_labels(train->targets(), space, train_labels);
  std::ostringstream desc;
  desc << train->describe() << "; " << spec.num_classes << " classes ("
       << (cfg.num_classes > 0 ? "data.num_classes" : "from the train labels") << ")";
  if (cfg.num_classes == 0) warn_empty_classes(train->targets(), spec.num_classes, train_labels);
  train = std::make_shared<TensorDataset>(train->inputs(), train->targets(), spec, desc.str());
  if (has_test) {
    auto test = load_idx_classification(test_images, test_labels, cfg.normalize, mean, stdev);
    if (test->size() == 0)
      throw Error(
          "the test split is empty: the file holds 0 images (leave data.test_images and "
          "data.test_labels empty for no test split)",
          test_images);
    if (test->spec().input_shape != train->spec().input_shape) {
      throw Error("test images have a different shape from the train images (" + train_images + ")",
                  test_images);
    }
    // Both splits share one label space.
    check_labels(test->targets(), space, test_labels);
    out.test =
        std::make_shared<TensorDataset>(test->inputs(), test->targets(), spec, test->describe());
  }
  out.train = train;
  return out;
}

std::shared_ptr<Dataset> make_idx_test_split(const DataConfig& cfg, const DataSpec& recorded) {
  if (cfg.test_images.empty() && cfg.test_labels.empty()) return nullptr;
  const std::string test_images = data_file(cfg, cfg.test_images, "data.test_images");
  const std::string test_labels = data_file(cfg, cfg.test_labels, "data.test_labels");
  const bool normalize =
      cfg.normalize && recorded.recipe.mean.size() == 1 && recorded.recipe.std.size() == 1;
  const double mean = normalize ? recorded.recipe.mean[0] : 0.0,
               stdev = normalize ? recorded.recipe.std[0] : 1.0;
  auto test = load_idx_classification(test_images, test_labels, normalize, mean, stdev);
  if (test->size() == 0)
    throw Error(
        "the test split is empty: the file holds 0 images (leave data.test_images and "
        "data.test_labels empty for no test split)",
        test_images);
  DataSpec spec = test->spec();
  const LabelSpace space = label_space(cfg, recorded.num_classes, "the run's (preprocess.json)");
  spec.num_classes = space.classes;
  spec.recipe.class_names = class_names(cfg, space);
  if (normalize) spec.recipe.mean = {mean}, spec.recipe.std = {stdev};
  check_labels(test->targets(), space, test_labels);
  std::ostringstream d;
  d << test->describe();
  if (normalize) d << ", standardized with the run's train mean " << mean << " std " << stdev;
  return std::make_shared<TensorDataset>(test->inputs(), test->targets(), spec, d.str());
}

std::vector<FormatRegistration> idx_formats() {
  FormatRegistration f;
  f.name = DataFormat::kIdx.name();
  f.make_splits = [](const DataConfig& cfg, int64_t, const at::Device&) {
    return make_idx_splits(cfg);
  };
  f.recorded_test_split = [](const DataConfig& cfg, const DataSpec& recorded, int64_t) {
    return make_idx_test_split(cfg, recorded);
  };
  f.preprocess_keys = {
      {"/input_shape", "data.train_images"},
      {"/pixels", "data.normalize, data.train_images (the train images' statistics)"}};
  f.host_pixels = true;
  // IDX image files, or PNG and JPEG pictures made gray (inputs.cpp)
  f.predict_inputs = [](const std::string& path, const DataSpec& spec, const DataConfig&) {
    return idx_inputs(path, spec);
  };
  return {std::move(f)};
}

}  // namespace dtrain::detail
