// The ways a run's splits are built from DataConfig; make_datasets() picks one by data.format.
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
// data.format tokens: token files (nanoGPT's flat uint16/uint32, llm.c's shards), memory-mapped;
// text: the bytes of text files. Windows of data.seq_len + 1 (Note [token windows]).
Splits make_token_splits(const DataConfig& cfg, int64_t seed);
Splits make_text_splits(const DataConfig& cfg, int64_t seed);
// data.format cifar10, cifar100: the binary version's batches under data.path (cifar.cpp); the
// training split's random crops and flips drawn from `seed` (Note [cifar augmentation]).
Splits make_cifar_splits(const DataConfig& cfg, int64_t seed);
// data.format csv: numeric columns under a header (csv.cpp); `seed` draws the held-out rows.
Splits make_csv_splits(const DataConfig& cfg, int64_t seed);
// data.format image_folder: JPEG and PNG files in one folder per class, decoded and transformed
// in the loader's threads (Note [image transforms]) or on `device`'s GPU (data.decode, Note [GPU
// decoding]); random crops drawn from `seed`.
Splits make_image_folder_splits(const DataConfig& cfg, int64_t seed, const at::Device& device);
// How many images an image folder dataset has decoded so far on the GPU and on the CPU
// (data.decode gpu: the files nvJPEG does not take); zeros for any other dataset.
struct ImageDecodeCounts {
  int64_t gpu = 0, cpu = 0;
};
ImageDecodeCounts image_decode_counts(const Dataset& dataset);

}  // namespace dtrain::detail
