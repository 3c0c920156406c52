// Dataset: a finite, indexable collection of samples that returns whole batches by index.
// Invariant: get(indices) returns inputs (N, ...) and targets (N, ...) in the order of
// `indices`, on the CPU (but an image folder's inputs with data.decode gpu: on the device its
// splits were made for, ready on any stream), and is safe to call from several loader threads
// at once.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain {

struct Batch {
  at::Tensor inputs;  // (N, ...)
  // (N,) int64 class ids ((N, T) for token sequences), or (N, D) float regression targets
  at::Tensor targets;
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
};

// How raw samples became the inputs and labels, beyond Note [uint8 pixels]'s pixel statistics:
// what the run's preprocess.json records (src/data/preprocess.h). An empty field does not apply.
struct InputRecipe {
  std::vector<std::string> feature_names, target_names;  // csv: the columns, in input order
  // csv: each feature column j standardized, (x - mean[j]) / std[j], with the train rows'
  // statistics (data.normalize); idx: one value for every pixel, (x / 255 - mean) / std.
  std::vector<double> mean, std;
  // the name of label i: image folders' class folders; idx, cifar, csv: data.class_names, or
  // CIFAR's label-name file (class_names() in src/data/labels.h)
  std::vector<std::string> class_names;
  int64_t resize = 0;  // image folders' evaluation: the shorter side before the center crop
};

// What a model needs to know about its data to build itself.
struct DataSpec {
  std::vector<int64_t> input_shape;         // one sample, e.g. {1, 28, 28}
  int64_t num_classes = 0;                  // > 0: classification with int64 targets
  int64_t target_dim = 0;                   // > 0: regression with float targets (N, target_dim)
  at::ScalarType input_dtype = at::kFloat;  // what the model receives
  // Note [uint8 pixels]: non-empty, the batches' inputs are uint8 pixels 0..255 of shape
  // (N, C, ...) with one entry per channel C, and the step engines standardize them on the device,
  // (x / 255 - pixel_mean[c]) / pixel_std[c], into input_dtype before the model sees them
  // (PixelNormalizer); a training step under autocast writes them straight into the autocast
  // dtype for a model that asks (Model::pixel_inputs). The loader thus gathers and copies a
  // quarter of the bytes of float images.
  std::vector<double> pixel_mean, pixel_std;
  InputRecipe recipe;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
  // get() into page-locked (pinned) host memory, for asynchronous copies to a GPU (CUDA builds
  // only). The default pins get()'s result, one more copy of the batch; a dataset that can
  // gather straight into pinned memory overrides it.
  virtual Batch get_pinned(const std::vector<int64_t>& indices) const;
  // What the loader calls: the batch as drawn in training epoch `epoch`, pinned or not. A dataset
  // whose samples change from draw to draw (an image folder's random crops and flips, Note [image
  // transforms]) takes that randomness from (run.seed, epoch, sample index), so that a run is
  // the same on any number of ranks and when resumed; the default ignores the epoch and calls
  // get_pinned() or get().
  virtual Batch fetch(const std::vector<int64_t>& indices, int64_t epoch, bool pinned) const;
  virtual DataSpec spec() const = 0;
  virtual std::string describe() const = 0;
};

// A dataset held as two tensors in memory (the first dimension indexes samples).
class TensorDataset : public Dataset {
 public:
  TensorDataset(at::Tensor inputs, at::Tensor targets, DataSpec spec, std::string description);
  int64_t size() const override { return inputs_.size(0); }
  Batch get(const std::vector<int64_t>& indices) const override;
  Batch get_pinned(const std::vector<int64_t>& indices) const override;  // gathers into pinned
  DataSpec spec() const override { return spec_; }
  std::string describe() const override { return description_; }
  const at::Tensor& inputs() const { return inputs_; }
  const at::Tensor& targets() const { return targets_; }

 private:
  at::Tensor index_of(const std::vector<int64_t>& indices) const;  // checked, as a tensor

  at::Tensor inputs_, targets_;
  DataSpec spec_;
  std::string description_;
};

struct DataConfig;

struct Splits {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> test;  // may be null
  // data.val_fraction: samples held out of the training set, evaluated beside the test split
  // (null without); make_datasets builds it from `plain` where a format sets it: the training
  // samples without their random augmentation, index for index.
  std::shared_ptr<Dataset> val;
  std::shared_ptr<Dataset> plain;
};

// Build the train and test splits the config describes (data.format), for a rank computing on
// `device` (an image folder decodes there with data.decode gpu or auto, Note [GPU decoding]).
// With data.val_fraction the validation split too: the formats of whole samples (idx, cifar,
// csv) hold out round(fraction x N) of the N training samples, the first of a permutation of
// 0..N-1 drawn from run.seed (the same on any number of ranks and on resume), unaugmented; the
// token format holds out the last fraction of each training file, read in order. The data's
// statistics (data.normalize) stay the whole training files'. Errors name the data.* key or the
// file.
Splits make_datasets(const DataConfig& cfg, int64_t seed, const at::Device& device = at::kCPU);

}  // namespace dtrain
