// data.format idx: the train and test splits from IDX files (Fashion-MNIST's layout), the train
// split's mean and std standardizing both.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/data/idx.h"
#include "dtrain/error.h"
#include "dtrain/log.h"

namespace dtrain::detail {
namespace {

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// cfg.path joined with one file name; an absolute name is used as is. A missing file is an error
// naming the path and the key that named it. (POSIX stat, not std::filesystem: the pip wheels of
// LibTorch 2.x export their own std::filesystem symbols, which can shadow libstdc++'s.)
std::string data_file(const DataConfig& cfg, const std::string& name, const std::string& key) {
  if (name.empty()) throw Error("file name is empty", key);
  const bool absolute = name.front() == '/';
  std::string path = name;
  if (!absolute && !cfg.path.empty()) {
    path = cfg.path + (cfg.path.back() == '/' ? "" : "/") + name;
  }
  if (!is_regular_file(path)) {
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    std::string hint;
    if (!absolute && !is_directory(cfg.path)) {
      hint = " (data.path '" + cfg.path + "' is not a directory)";
    }
    throw Error((exists ? "not a regular file: " : "file not found: ") + path + hint, key);
  }
  return path;
}

// Every label of `targets` (N,) int64 must lie in [0, classes); the first that does not is an
// Error naming the file, the sample index and the value. `rule` says where `classes` came from.
void check_labels(const at::Tensor& targets, int64_t classes, const std::string& path,
                  const std::string& rule) {
  const at::Tensor bad = (targets < 0).logical_or_(targets >= classes).nonzero();
  if (bad.size(0) == 0) return;
  const int64_t index = bad[0][0].item<int64_t>();
  throw Error("label " + std::to_string(targets[index].item<int64_t>()) + " of sample " +
                  std::to_string(index) + " (" + std::to_string(bad.size(0)) +
                  " such label(s)) is outside the model's classes [0, " + std::to_string(classes) +
                  "), " + rule,
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
  double mean = 0.0, stdev = 1.0;
  if (cfg.normalize) {
    // Population mean and std of the train split's pixels (values in [0, 1]): two passes over
    // chunks, each summed by ATen in float and accumulated here in double.
    const at::Tensor flat = train->inputs().reshape({-1});
    const int64_t count = flat.numel();
    if (count == 0) throw Error("cannot standardize an empty train split", "data.normalize");
    const int64_t chunk = int64_t{1} << 20;
    double sum = 0.0;
    for (int64_t pos = 0; pos < count; pos += chunk) {
      sum += flat.narrow(0, pos, std::min(chunk, count - pos)).sum().item<double>();
    }
    mean = sum / static_cast<double>(count);
    double sq = 0.0;
    for (int64_t pos = 0; pos < count; pos += chunk) {
      const at::Tensor part = flat.narrow(0, pos, std::min(chunk, count - pos));
      sq += part.sub(mean).square().sum().item<double>();
    }
    stdev = std::sqrt(sq / static_cast<double>(count));
    if (!(stdev > 1e-12)) {
      throw Error("train images have zero variance; cannot standardize (set data.normalize=false)",
                  "data.normalize");
    }
    train->inputs().sub_(mean).div_(stdev);
    std::ostringstream d;
    d << train->describe() << ", standardized with train mean " << mean << " std " << stdev;
    train = std::make_shared<TensorDataset>(train->inputs(), train->targets(), train->spec(),
                                            d.str());
  }
  // The label space: data.num_classes, or the train labels' largest + 1; every label inside it.
  DataSpec spec = train->spec();
  std::string rule;
  if (cfg.num_classes > 0) {
    spec.num_classes = cfg.num_classes;
    rule = "set by data.num_classes";
  } else {
    rule = "taken from the train labels (largest + 1, as data.num_classes is 0); set "
           "data.num_classes to cover every label";
  }
  check_labels(train->targets(), spec.num_classes, train_labels, rule);
  std::ostringstream desc;
  desc << train->describe() << "; " << spec.num_classes << " classes ("
       << (cfg.num_classes > 0 ? "data.num_classes" : "from the train labels") << ")";
  if (cfg.num_classes == 0 && train->size() > 0) {
    const at::Tensor counts = at::bincount(train->targets(), {}, spec.num_classes);
    const int64_t empty = (counts == 0).sum().item<int64_t>();
    if (empty > 0)
      log::warn(std::to_string(empty) + " of the " + std::to_string(spec.num_classes) +
                " classes taken from the train labels (" + train_labels +
                ") have no training sample; set data.num_classes if that is not meant");
  }
  train = std::make_shared<TensorDataset>(train->inputs(), train->targets(), spec, desc.str());
  if (has_test) {
    auto test = load_idx_classification(test_images, test_labels, cfg.normalize, mean, stdev);
    if (test->spec().input_shape != train->spec().input_shape) {
      throw Error("test images have a different shape from the train images (" +
                      train_images + ")",
                  test_images);
    }
    // Both splits share one label space.
    check_labels(test->targets(), spec.num_classes, test_labels, rule);
    out.test = std::make_shared<TensorDataset>(test->inputs(), test->targets(), spec,
                                               test->describe());
  }
  out.train = train;
  return out;
}

}  // namespace dtrain::detail
