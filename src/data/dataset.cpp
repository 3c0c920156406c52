// In-memory datasets and the factory that builds a run's train and test splits from DataConfig.
#include "dtrain/data/dataset.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "dtrain/config.h"
#include "dtrain/data/idx.h"
#include "dtrain/error.h"

namespace dtrain {

TensorDataset::TensorDataset(at::Tensor inputs, at::Tensor targets, DataSpec spec,
                             std::string description)
    : inputs_(std::move(inputs)),
      targets_(std::move(targets)),
      spec_(std::move(spec)),
      description_(std::move(description)) {
  if (!inputs_.defined() || !targets_.defined() || inputs_.dim() < 1 || targets_.dim() < 1) {
    throw Error("a TensorDataset needs defined inputs and targets with a sample dimension",
                description_);
  }
  if (inputs_.size(0) != targets_.size(0)) {
    throw Error("inputs have " + std::to_string(inputs_.size(0)) + " samples but targets have " +
                    std::to_string(targets_.size(0)),
                description_);
  }
}

Batch Dataset::get_pinned(const std::vector<int64_t>& indices) const {
  Batch b = get(indices);
  if (b.inputs.defined()) b.inputs = b.inputs.pin_memory();
  if (b.targets.defined()) b.targets = b.targets.pin_memory();
  return b;
}

at::Tensor TensorDataset::index_of(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (const int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw Error("sample index " + std::to_string(i) + " is out of range [0, " +
                      std::to_string(n) + ")",
                  description_);
    }
  }
  at::Tensor index = at::empty({static_cast<int64_t>(indices.size())}, at::kLong);
  if (!indices.empty()) {
    std::memcpy(index.data_ptr<int64_t>(), indices.data(), indices.size() * sizeof(int64_t));
  }
  return index;
}

Batch TensorDataset::get(const std::vector<int64_t>& indices) const {
  const at::Tensor index = index_of(indices);
  return Batch{inputs_.index_select(0, index), targets_.index_select(0, index)};
}

Batch TensorDataset::get_pinned(const std::vector<int64_t>& indices) const {
  // Gathered straight into pinned memory: one pass over the batch instead of gather + copy (a
  // ResNet-50 batch of fp32 images is 77 MB).
  const at::Tensor index = index_of(indices);
  auto gather = [&](const at::Tensor& from) {
    std::vector<int64_t> shape = from.sizes().vec();
    shape[0] = index.size(0);
    at::Tensor out = at::empty(shape, from.options().pinned_memory(true));
    at::index_select_out(out, from, 0, index);
    return out;
  };
  return Batch{gather(inputs_), gather(targets_)};
}

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

Splits make_idx(const DataConfig& cfg) {
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
  if (has_test) {
    auto test = load_idx_classification(test_images, test_labels, cfg.normalize, mean, stdev);
    if (test->spec().input_shape != train->spec().input_shape) {
      throw Error("test images have a different shape from the train images (" +
                      train_images + ")",
                  test_images);
    }
    // Both splits share one label space.
    DataSpec spec = train->spec();
    spec.num_classes = std::max(spec.num_classes, test->spec().num_classes);
    train = std::make_shared<TensorDataset>(train->inputs(), train->targets(), spec,
                                            train->describe());
    out.test = std::make_shared<TensorDataset>(test->inputs(), test->targets(), spec,
                                               test->describe());
  }
  out.train = train;
  return out;
}

void require_positive(int64_t value, const char* key) {
  if (value < 1) throw Error("must be >= 1, got " + std::to_string(value), key);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Train split from a generator seeded with `seed`, test split (if any) from `seed + 1`.
// `make(n, generator)` returns (inputs, targets) for n samples.
template <class Make>
Splits generated_splits(const DataConfig& cfg, int64_t seed, Make make, const DataSpec& spec,
                        const std::string& description) {
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  at::Generator test_gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed) + 1);
  Splits out;
  auto train = make(cfg.synthetic_size, gen);
  out.train = std::make_shared<TensorDataset>(train.first, train.second, spec, description + " train");
  if (cfg.synthetic_test_size > 0) {
    auto test = make(cfg.synthetic_test_size, test_gen);
    out.test = std::make_shared<TensorDataset>(test.first, test.second, spec, description + " test");
  }
  return out;
}

// Random images: inputs (N, C, H, W) standard normal, labels uniform in [0, classes). Nothing to
// learn; for measuring throughput of image models without a dataset on disk.
Splits make_synthetic_images(const DataConfig& cfg, int64_t seed) {
  const auto& shape = cfg.synthetic_shape;
  if (shape.size() != 3) {
    throw Error("data.synthetic_task 'images' needs data.synthetic_shape = [C, H, W] (3 entries), "
                "got " + shape_text(shape),
                "data.synthetic_shape");
  }
  for (const int64_t d : shape) require_positive(d, "data.synthetic_shape");
  if (cfg.synthetic_classes < 2) {
    throw Error("must be >= 2, got " + std::to_string(cfg.synthetic_classes),
                "data.synthetic_classes");
  }
  const int64_t c = cfg.synthetic_classes;
  DataSpec spec;
  spec.input_shape = shape;
  spec.num_classes = c;
  spec.input_dtype = at::kFloat;
  auto make = [&](int64_t n, at::Generator& g) {
    std::vector<int64_t> dims = {n};
    dims.insert(dims.end(), shape.begin(), shape.end());
    at::Tensor x = at::randn(dims, g, at::TensorOptions().dtype(at::kFloat));      // (N, C, H, W)
    at::Tensor y = at::randint(0, c, {n}, g, at::TensorOptions().dtype(at::kLong));  // (N,)
    return std::make_pair(x, y);
  };
  std::ostringstream d;
  d << "synthetic images (" << shape_text(shape) << ", " << c << " classes, seed " << seed << ")";
  return generated_splits(cfg, seed, make, spec, d.str());
}

// Random tokens for language models: a stream of N * (T + 1) ids uniform in [0, classes) (classes
// = vocabulary size), cut into N windows of T + 1; inputs (N, T) are a window's first T ids,
// targets (N, T) the same window shifted by one (next-token prediction).
Splits make_synthetic_tokens(const DataConfig& cfg, int64_t seed) {
  const auto& shape = cfg.synthetic_shape;
  if (shape.size() != 1) {
    throw Error("data.synthetic_task 'tokens' needs data.synthetic_shape = [sequence length] "
                "(1 entry), got " + shape_text(shape),
                "data.synthetic_shape");
  }
  const int64_t t = shape[0];
  require_positive(t, "data.synthetic_shape");
  if (cfg.synthetic_classes < 2) {
    throw Error("must be >= 2 (the vocabulary size), got " +
                    std::to_string(cfg.synthetic_classes),
                "data.synthetic_classes");
  }
  const int64_t v = cfg.synthetic_classes;
  DataSpec spec;
  spec.input_shape = {t};
  spec.num_classes = v;
  spec.input_dtype = at::kLong;
  auto make = [&](int64_t n, at::Generator& g) {
    // (N * (T + 1),) viewed as (N, T + 1) windows
    const at::Tensor stream =
        at::randint(0, v, {n * (t + 1)}, g, at::TensorOptions().dtype(at::kLong)).view({n, t + 1});
    at::Tensor x = stream.narrow(1, 0, t).contiguous();  // (N, T)
    at::Tensor y = stream.narrow(1, 1, t).contiguous();  // (N, T)
    return std::make_pair(x, y);
  };
  std::ostringstream d;
  d << "synthetic tokens (sequence length " << t << ", vocabulary " << v << ", seed " << seed
    << ")";
  return generated_splits(cfg, seed, make, spec, d.str());
}

Splits make_synthetic(const DataConfig& cfg, int64_t seed) {
  const std::string& task = cfg.synthetic_task;
  if (task != "regression" && task != "classification" && task != "images" && task != "tokens") {
    throw Error("unknown synthetic task '" + task +
                    "' (known: regression, classification, images, tokens)",
                "data.synthetic_task");
  }
  require_positive(cfg.synthetic_size, "data.synthetic_size");
  if (cfg.synthetic_test_size < 0) {
    throw Error("must be >= 0, got " + std::to_string(cfg.synthetic_test_size),
                "data.synthetic_test_size");
  }
  if (task == "images") return make_synthetic_images(cfg, seed);
  if (task == "tokens") return make_synthetic_tokens(cfg, seed);
  require_positive(cfg.synthetic_features, "data.synthetic_features");
  if (cfg.synthetic_noise < 0) {
    throw Error("must be >= 0, got " + std::to_string(cfg.synthetic_noise),
                "data.synthetic_noise");
  }
  const int64_t f = cfg.synthetic_features;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  // The train generator (seed) draws the task's parameters first, then the train samples; the
  // test samples come from seed + 1 and share the parameters.
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  at::Generator test_gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed) + 1);

  Splits out;
  DataSpec spec;
  spec.input_shape = {f};
  spec.input_dtype = at::kFloat;
  std::ostringstream d;
  if (task == "regression") {
    const at::Tensor w = at::randn({f, 1}, gen, opts);  // (F, 1)
    const at::Tensor b = at::randn({1}, gen, opts);     // (1,)
    auto make = [&](int64_t n, at::Generator& g) {
      at::Tensor x = at::randn({n, f}, g, opts);                                     // (N, F)
      at::Tensor y = at::matmul(x, w).add_(b).add_(at::randn({n, 1}, g, opts).mul_(
                                                      cfg.synthetic_noise));  // (N, 1)
      return std::make_pair(x, y);
    };
    spec.target_dim = 1;
    d << "synthetic regression (" << f << " features, noise " << cfg.synthetic_noise << ", seed "
      << seed << ")";
    auto train = make(cfg.synthetic_size, gen);
    out.train = std::make_shared<TensorDataset>(train.first, train.second, spec,
                                                d.str() + " train");
    if (cfg.synthetic_test_size > 0) {
      auto test = make(cfg.synthetic_test_size, test_gen);
      out.test = std::make_shared<TensorDataset>(test.first, test.second, spec,
                                                 d.str() + " test");
    }
  } else {
    if (cfg.synthetic_classes < 2) {
      throw Error("must be >= 2, got " + std::to_string(cfg.synthetic_classes),
                  "data.synthetic_classes");
    }
    const int64_t c = cfg.synthetic_classes;
    const at::Tensor w = at::randn({f, c}, gen, opts);  // (F, C)
    auto make = [&](int64_t n, at::Generator& g) {
      at::Tensor x = at::randn({n, f}, g, opts);         // (N, F)
      at::Tensor y = at::matmul(x, w).argmax(1);        // (N,) int64
      return std::make_pair(x, y);
    };
    spec.num_classes = c;
    d << "synthetic classification (" << f << " features, " << c << " classes, seed " << seed
      << ")";
    auto train = make(cfg.synthetic_size, gen);
    out.train = std::make_shared<TensorDataset>(train.first, train.second, spec,
                                                d.str() + " train");
    if (cfg.synthetic_test_size > 0) {
      auto test = make(cfg.synthetic_test_size, test_gen);
      out.test = std::make_shared<TensorDataset>(test.first, test.second, spec,
                                                 d.str() + " test");
    }
  }
  return out;
}

}  // namespace

Splits make_datasets(const DataConfig& cfg, int64_t seed) {
  if (cfg.format == "idx") return make_idx(cfg);
  if (cfg.format == "synthetic") return make_synthetic(cfg, seed);
  throw Error("unknown data format '" + cfg.format + "' (known: idx, synthetic)", "data.format");
}

}  // namespace dtrain
