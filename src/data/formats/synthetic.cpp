// data.format synthetic: generated train and test splits, deterministic per seed, for tests and
// benchmarks that need no files (regression, classification, random images, random tokens).
// Registered as data.format synthetic (Note [data formats]).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>
#include <utility>

#include "data/formats/registry.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "util/format.h"
#include "util/host_memory.h"

namespace dtrain::detail {
namespace {

using Samples = std::pair<at::Tensor, at::Tensor>;  // (inputs, targets)

// The train split from `gen`, the test split (if any) from `test_gen`; `make(n, generator)` draws
// n samples. A task whose parameters are drawn from `gen` draws them before calling this.
template <class Make>
Splits build_splits(const DataConfig& cfg, at::Generator& gen, at::Generator& test_gen, Make make,
                    const DataSpec& spec, const std::string& description) {
  Splits out;
  const Samples train = make(cfg.synthetic_size, gen);
  out.train =
      std::make_shared<TensorDataset>(train.first, train.second, spec, description + " train");
  if (cfg.synthetic_test_size > 0) {
    const Samples test = make(cfg.synthetic_test_size, test_gen);
    out.test =
        std::make_shared<TensorDataset>(test.first, test.second, spec, description + " test");
  }
  return out;
}

// data.synthetic_shape, which `task` needs with `entries` entries (`layout` names them).
const std::vector<int64_t>& sample_shape(const DataConfig& cfg, size_t entries, const char* task,
                                         const char* layout) {
  const auto& shape = cfg.synthetic_shape;
  if (shape.size() != entries)
    throw Error(std::string("data.synthetic_task '") + task +
                    "' needs data.synthetic_shape = " + layout + " (" + std::to_string(entries) +
                    (entries == 1 ? " entry" : " entries") + "), got " + shape_str(shape),
                "data.synthetic_shape");
  return shape;
}

// Targets (N, 1) = x w + b + noise for inputs (N, F) standard normal.
Splits regression(const DataConfig& cfg, int64_t seed, at::Generator& gen,
                  at::Generator& test_gen) {
  const int64_t f = cfg.synthetic_features;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor w = at::randn({f, 1}, gen, opts);  // (F, 1)
  const at::Tensor b = at::randn({1}, gen, opts);     // (1,)
  auto make = [&](int64_t n, at::Generator& g) {
    at::Tensor x = at::randn({n, f}, g, opts);  // (N, F)
    at::Tensor y =
        at::matmul(x, w).add_(b).add_(at::randn({n, 1}, g, opts).mul_(cfg.synthetic_noise));
    return Samples(x, y);  // y: (N, 1)
  };
  DataSpec spec;
  spec.input_shape = {f};
  spec.target_dim = 1;
  std::ostringstream d;
  d << "synthetic regression (" << f << " features, noise " << cfg.synthetic_noise << ", seed "
    << seed << ")";
  return build_splits(cfg, gen, test_gen, make, spec, d.str());
}

// Labels (N,) = argmax of x W for inputs (N, F) standard normal: a linear problem to learn.
Splits classification(const DataConfig& cfg, int64_t seed, at::Generator& gen,
                      at::Generator& test_gen) {
  const int64_t f = cfg.synthetic_features, c = cfg.synthetic_classes;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor w = at::randn({f, c}, gen, opts);  // (F, C)
  auto make = [&](int64_t n, at::Generator& g) {
    at::Tensor x = at::randn({n, f}, g, opts);      // (N, F)
    return Samples(x, at::matmul(x, w).argmax(1));  // labels (N,) int64
  };
  DataSpec spec;
  spec.input_shape = {f};
  spec.num_classes = c;
  std::ostringstream d;
  d << "synthetic classification (" << f << " features, " << c << " classes, seed " << seed << ")";
  return build_splits(cfg, gen, test_gen, make, spec, d.str());
}

// Random images: inputs (N, C, H, W) standard normal, labels uniform in [0, classes). Nothing to
// learn; for measuring throughput of image models without a dataset on disk. With
// data.synthetic_uint8 the pixels are uniform in 0..255 instead, standardized on the device
// (Note [uint8 pixels]) with the uniform distribution's mean 1/2 and std 1/sqrt(12) (of 1).
Splits images(const DataConfig& cfg, int64_t seed, at::Generator& gen, at::Generator& test_gen) {
  const auto& shape = sample_shape(cfg, 3, "images", "[C, H, W]");
  const int64_t c = cfg.synthetic_classes;
  const bool bytes = cfg.synthetic_uint8;
  auto make = [&](int64_t n, at::Generator& g) {
    std::vector<int64_t> dims = {n};
    dims.insert(dims.end(), shape.begin(), shape.end());
    at::Tensor x = bytes
                       ? at::randint(0, 256, dims, g, at::TensorOptions().dtype(at::kByte))
                       : at::randn(dims, g, at::TensorOptions().dtype(at::kFloat));  // (N, C, H, W)
    at::Tensor y = at::randint(0, c, {n}, g, at::TensorOptions().dtype(at::kLong));  // (N,)
    return Samples(x, y);
  };
  DataSpec spec;
  spec.input_shape = shape;
  spec.num_classes = c;
  if (bytes) {
    spec.pixel_mean.assign(static_cast<size_t>(shape[0]), 0.5);
    spec.pixel_std.assign(static_cast<size_t>(shape[0]), 1.0 / std::sqrt(12.0));
  }
  std::ostringstream d;
  d << "synthetic images (" << shape_str(shape) << (bytes ? " uint8" : "") << ", " << c
    << " classes, seed " << seed << ")";
  return build_splits(cfg, gen, test_gen, make, spec, d.str());
}

// Random tokens for language models: a stream of N * (T + 1) ids uniform in [0, classes) (classes
// = vocabulary size), cut into N windows of T + 1; inputs (N, T) are a window's first T ids,
// targets (N, T) the same window shifted by one (next-token prediction).
Splits tokens(const DataConfig& cfg, int64_t seed, at::Generator& gen, at::Generator& test_gen) {
  const auto& shape = sample_shape(cfg, 1, "tokens", "[sequence length]");
  const int64_t t = shape[0], v = cfg.synthetic_classes;
  auto make = [&](int64_t n, at::Generator& g) {
    // (N * (T + 1),) viewed as (N, T + 1) windows
    const at::Tensor stream =
        at::randint(0, v, {n * (t + 1)}, g, at::TensorOptions().dtype(at::kLong)).view({n, t + 1});
    return Samples(stream.narrow(1, 0, t).contiguous(), stream.narrow(1, 1, t).contiguous());
  };
  DataSpec spec;
  spec.input_shape = {t};
  spec.num_classes = v;
  spec.input_dtype = at::kLong;
  std::ostringstream d;
  d << "synthetic tokens (sequence length " << t << ", vocabulary " << v << ", seed " << seed
    << ")";
  return build_splits(cfg, gen, test_gen, make, spec, d.str());
}

// The bytes the task's two splits take (inputs, targets and the largest temporaries), in double
// so that no product of config values overflows; more than the machine has is an Error naming the
// keys that set the size.
void check_size(const DataConfig& cfg) {
  const double n =
      static_cast<double>(cfg.synthetic_size) + static_cast<double>(cfg.synthetic_test_size);
  double shape = 1;
  for (int64_t d : cfg.synthetic_shape) shape *= static_cast<double>(d);
  const double f = static_cast<double>(cfg.synthetic_features);
  const double c = static_cast<double>(cfg.synthetic_classes);
  double per_sample = 0;  // bytes
  std::string keys = "data.synthetic_size, data.synthetic_test_size", of;
  switch (cfg.synthetic_task) {
    case SyntheticTask::kRegression:
      per_sample = (f + 3) * 4, keys += ", data.synthetic_features",
      of = format("%.0f features", f);
      break;
    case SyntheticTask::kClassification:
      per_sample = (f + c) * 4 + 8, keys += ", data.synthetic_features, data.synthetic_classes",
      of = format("%.0f features", f);
      break;
    case SyntheticTask::kImages:
      per_sample = shape * (cfg.synthetic_uint8 ? 1 : 4) + 8, keys += ", data.synthetic_shape",
      of = shape_str(cfg.synthetic_shape);
      break;
    case SyntheticTask::kTokens:
      per_sample = (3 * shape + 1) * 8, keys += ", data.synthetic_shape",
      of = shape_str(cfg.synthetic_shape) + " tokens";
      break;
  }
  check_host_bytes(n * per_sample,
                   format("synthetic %s data of %lld + %lld samples of %s",
                          to_string(cfg.synthetic_task), static_cast<long long>(cfg.synthetic_size),
                          static_cast<long long>(cfg.synthetic_test_size), of.c_str()),
                   keys,
                   "lower data.synthetic_size (and data.synthetic_test_size) or the sample size");
}

}  // namespace

Splits make_synthetic_splits(const DataConfig& cfg, int64_t seed) {
  // The schema's ranges, also for a DataConfig filled in C++.
  Config::check_value("data.synthetic_size", static_cast<double>(cfg.synthetic_size));
  Config::check_value("data.synthetic_test_size", static_cast<double>(cfg.synthetic_test_size));
  Config::check_value("data.synthetic_features", static_cast<double>(cfg.synthetic_features));
  Config::check_value("data.synthetic_classes", static_cast<double>(cfg.synthetic_classes));
  Config::check_value("data.synthetic_noise", cfg.synthetic_noise);
  Config::check_value("data.synthetic_shape", cfg.synthetic_shape);
  if (cfg.synthetic_task == SyntheticTask::kImages) sample_shape(cfg, 3, "images", "[C, H, W]");
  if (cfg.synthetic_task == SyntheticTask::kTokens)
    sample_shape(cfg, 1, "tokens", "[sequence length]");
  if (cfg.synthetic_uint8 && cfg.synthetic_task != SyntheticTask::kImages)
    throw Error(std::string("is for data.synthetic_task images, but the task is ") +
                    to_string(cfg.synthetic_task),
                "data.synthetic_uint8");
  check_size(cfg);
  if (cfg.num_classes > 0 && (cfg.synthetic_task == SyntheticTask::kRegression ||
                              cfg.num_classes != cfg.synthetic_classes))
    throw Error(
        "is " + std::to_string(cfg.num_classes) + ", but synthetic " +
            to_string(cfg.synthetic_task) + " data " +
            (cfg.synthetic_task == SyntheticTask::kRegression
                 ? std::string("has no classes")
                 : "has data.synthetic_classes = " + std::to_string(cfg.synthetic_classes)) +
            "; leave data.num_classes at 0 for synthetic data",
        "data.num_classes");
  // The train generator (seed) draws a task's parameters first, then the train samples; the test
  // samples come from seed + 1 and share the parameters.
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  at::Generator test_gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed) + 1);
  switch (cfg.synthetic_task) {
    case SyntheticTask::kRegression:
      return regression(cfg, seed, gen, test_gen);
    case SyntheticTask::kClassification:
      return classification(cfg, seed, gen, test_gen);
    case SyntheticTask::kImages:
      return images(cfg, seed, gen, test_gen);
    case SyntheticTask::kTokens:
      return tokens(cfg, seed, gen, test_gen);
  }
  throw Error("unknown synthetic task (internal error)", "data.synthetic_task");
}

std::vector<FormatRegistration> synthetic_formats() {
  FormatRegistration f;
  f.name = DataFormat::kSynthetic.name();
  f.make_splits = [](const DataConfig& cfg, int64_t seed, const at::Device&) {
    return make_synthetic_splits(cfg, seed);
  };
  f.preprocess_keys = {{"/input_shape", "data.synthetic_features, data.synthetic_shape"},
                       {"/input_dtype", "data.synthetic_task"},
                       {"/task", "data.synthetic_task"},
                       {"/pixels", "data.synthetic_uint8"}};
  return {std::move(f)};
}

}  // namespace dtrain::detail
