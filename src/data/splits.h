// The ways a run's splits are built from DataConfig, one per format, each registered by its file in
// src/data/formats/ (formats/registry.h), where make_datasets() looks data.format up.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

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
// The test split alone (null when the config names none), preprocessed with `recorded`, the
// DataSpec of a run's preprocess.json (its mean and std, its classes unless data.num_classes is
// set): the training files are not read.
std::shared_ptr<Dataset> make_idx_test_split(const DataConfig& cfg, const DataSpec& recorded);
std::shared_ptr<Dataset> make_cifar_test_split(const DataConfig& cfg, const DataSpec& recorded);
// data.format csv: numeric columns under a header (csv.cpp); `seed` draws the held-out rows.
// `recorded` (dtrain eval: the run's preprocess.json) gives the statistics and the classes
// instead of the train rows.
Splits make_csv_splits(const DataConfig& cfg, int64_t seed, const DataSpec* recorded = nullptr);
// dtrain eval's csv test split: data.test_files alone, with `recorded`'s statistics and classes
// (the train files unread; dtrain eval compares its columns with preprocess.json's); without
// data.test_files, the rows data.test_fraction holds out of the train files (make_csv_splits
// with `recorded`).
std::shared_ptr<Dataset> make_csv_test_split(const DataConfig& cfg, const DataSpec& recorded,
                                             int64_t seed);
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

// data.val_fraction (make_datasets): of n training samples, round(fraction n) held out, the
// first of a Fisher-Yates permutation of 0..n-1 drawn from `seed`'s own stream: (the training
// indices, the held-out ones), each ascending. Fewer than one in either is an Error naming
// data.val_fraction.
std::pair<std::vector<int64_t>, std::vector<int64_t>> held_out_indices(int64_t n, double fraction,
                                                                       int64_t seed);
// `splits.train` becomes the samples kept, `splits.val` the held-out ones of `splits.plain` (the
// same samples unaugmented; `splits.train` itself when null).
void hold_out(Splits& splits, double fraction, int64_t seed);

// dtrain eval's test split (null when the config has none), preprocessed as the run was:
// `recorded` is the DataSpec read from its preprocess.json. The format's recorded_test_split
// where it registers one: idx and cifar10/100 read the test files alone, with the recorded
// statistics; csv takes the recorded statistics and classes and reads data.test_files alone (the
// train files only for held-out rows, data.test_fraction). Image folders, synthetic, token and
// text data compute nothing from their training split, and are built as for training.
std::shared_ptr<Dataset> make_recorded_test_split(const DataConfig& cfg, const DataSpec& recorded,
                                                  int64_t seed, const at::Device& device);

}  // namespace dtrain::detail
