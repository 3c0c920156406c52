// The two ways a run's splits are built from DataConfig; make_datasets() picks one by data.format.
#pragma once

#include <cstdint>

#include "dtrain/data/dataset.h"

namespace dtrain {
struct DataConfig;
}

namespace dtrain::detail {

// data.format idx: the four IDX files under data.path (errors name the data.* key and the file).
Splits make_idx_splits(const DataConfig& cfg);
// data.format synthetic: generated from `seed` (the train split) and `seed + 1` (the test split).
Splits make_synthetic_splits(const DataConfig& cfg, int64_t seed);

}  // namespace dtrain::detail
