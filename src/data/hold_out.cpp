// data.val_fraction for formats of whole samples: a validation split held out of the training
// samples by a fixed rule of run.seed (splits.h, hold_out).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/images/image_transforms.h"
#include "data/splits.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

// The samples `index` of `base`, renumbered 0..n-1; a sample keeps its base index for its draws
// (augmentation is keyed by it), so it is transformed as it would be in the whole set.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<Dataset> base, std::vector<int64_t> index, std::string description)
      : base_(std::move(base)), index_(std::move(index)), description_(std::move(description)) {}
  int64_t size() const override { return static_cast<int64_t>(index_.size()); }
  Batch get(const std::vector<int64_t>& indices) const override { return base_->get(map(indices)); }
  Batch get_pinned(const std::vector<int64_t>& indices) const override {
    return base_->get_pinned(map(indices));
  }
  Batch fetch(const std::vector<int64_t>& indices, int64_t epoch, bool pinned) const override {
    return base_->fetch(map(indices), epoch, pinned);
  }
  DataSpec spec() const override { return base_->spec(); }
  std::string describe() const override { return description_; }

 private:
  std::vector<int64_t> map(const std::vector<int64_t>& indices) const {
    std::vector<int64_t> out;
    out.reserve(indices.size());
    for (const int64_t i : indices) {
      if (i < 0 || i >= size())
        throw Error("sample index " + std::to_string(i) + " is out of range [0, " +
                        std::to_string(size()) + ")",
                    description_);
      out.push_back(index_[static_cast<size_t>(i)]);
    }
    return out;
  }
  std::shared_ptr<Dataset> base_;
  std::vector<int64_t> index_;
  std::string description_;
};

}  // namespace

std::pair<std::vector<int64_t>, std::vector<int64_t>> held_out_indices(int64_t n, double fraction,
                                                                       int64_t seed) {
  const auto k = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  if (k < 1 || k >= n)
    throw Error(
        format(
            "holds out %lld of the %lld training samples; it must leave at least one in each split",
            static_cast<long long>(k), static_cast<long long>(n)),
        "data.val_fraction");
  // A Fisher-Yates shuffle from its own stream of run.seed; the first k are held out.
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  SampleRandom random(static_cast<uint64_t>(seed) ^ 0x56414C4944415445ull, 0, 0);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(random.below(i + 1))]);
  std::vector<int64_t> val(order.begin(), order.begin() + k), train(order.begin() + k, order.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  return {std::move(train), std::move(val)};
}

void hold_out(Splits& splits, double fraction, int64_t seed) {
  const int64_t n = splits.train->size();
  auto [train, val] = held_out_indices(n, fraction, seed);
  const auto k = static_cast<long long>(val.size());
  const std::shared_ptr<Dataset> plain = splits.plain ? splits.plain : splits.train;
  const std::string whole = splits.train->describe();
  splits.val = std::make_shared<Subset>(plain, std::move(val),
                                        format("validation: %lld of the %lld training samples held "
                                               "out (data.val_fraction %g, drawn with run.seed)",
                                               k, static_cast<long long>(n), fraction));
  splits.train = std::make_shared<Subset>(
      splits.train, std::move(train),
      whole + format("; %lld samples held out for validation (data.val_fraction)", k));
}

}  // namespace dtrain::detail
