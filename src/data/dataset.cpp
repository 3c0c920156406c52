// In-memory datasets, and the factory that builds a run's train and test splits from DataConfig
// by its format's registration (formats/registry.h, Note [data formats]).
#include "dtrain/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "config/data_formats.h"
#include "data/formats/registry.h"
#include "data/splits.h"
#include "dtrain/config.h"
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

Batch Dataset::fetch(const std::vector<int64_t>& indices, int64_t /*epoch*/, bool pinned) const {
  return pinned ? get_pinned(indices) : get(indices);
}

at::Tensor TensorDataset::index_of(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (const int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw Error(
          "sample index " + std::to_string(i) + " is out of range [0, " + std::to_string(n) + ")",
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

Splits make_datasets(const DataConfig& cfg, int64_t seed, const at::Device& device) {
  Splits splits = detail::registered_format(cfg.format).make_splits(cfg, seed, device);
  // Each format names its empty file itself; this holds for every format, whatever it checks.
  if (splits.train->size() == 0)
    throw Error("the training split is empty: " + splits.train->describe(), "data.path");
  // Formats the config does not know (a program's own registrations) hold nothing out.
  const config::FormatRules* rules = config::find_format(cfg.format.name());
  const bool holds_out = rules != nullptr && std::find(rules->reads.begin(), rules->reads.end(),
                                                       "data.val_fraction") != rules->reads.end();
  if (cfg.val_fraction > 0 && holds_out && !splits.val)
    detail::hold_out(splits, cfg.val_fraction, seed);
  splits.plain.reset();
  return splits;
}

namespace detail {

std::shared_ptr<Dataset> make_recorded_test_split(const DataConfig& cfg, const DataSpec& recorded,
                                                  int64_t seed, const at::Device& device) {
  const FormatRegistration format = registered_format(cfg.format);
  if (format.recorded_test_split) return format.recorded_test_split(cfg, recorded, seed);
  return format.make_splits(cfg, seed, device).test;
}

}  // namespace detail
}  // namespace dtrain
