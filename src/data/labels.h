// Class labels against the model's classes. The readers of labelled files (IDX, CIFAR, CSV)
// check every train and test label with these before training, so that a label outside
// [0, classes) is an Error naming the file and the sample (a record, a line), never a NaN loss on
// the GPU. (Image folders and synthetic data make their labels inside the classes; token data
// checks each token against the vocabulary as its window is read.) The model's own output width
// is checked against the same classes once it is built (check_outputs_fit, train/loss.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain {
struct DataConfig;
}

namespace dtrain::detail {

struct LabelSpace {
  int64_t classes = 0;
  std::string rule;  // where `classes` came from, for errors ("set by data.num_classes")
};

// data.num_classes when it is set, else `fallback` (the format's classes, or the train labels'
// largest + 1), whose origin `fallback_rule` tells.
LabelSpace label_space(const DataConfig& cfg, int64_t fallback, const std::string& fallback_rule);

// The index of the first label of `targets` (N,) int64 outside [0, classes), or -1 when every
// label lies inside; *count is set to how many lie outside.
int64_t first_bad_label(const at::Tensor& targets, int64_t classes, int64_t* count);

// "label 12 of <sample> (3 such label(s)) is outside the model's classes [0, 10), <rule>"; the
// count is left out when it is 0 (a reader that stops at the first).
std::string label_error(int64_t label, const std::string& sample, int64_t count,
                        const LabelSpace& space);

// The names of the classes of `space` (InputRecipe::class_names): data.class_names when the
// config gives them, which must be exactly one per class (else an Error naming data.class_names,
// its count and the classes' rule); else `shipped`, the names the data files carry (CIFAR's
// label-name file, `shipped_file`) when they are one per class (else a warning naming the file,
// and none); else none.
std::vector<std::string> class_names(const DataConfig& cfg, const LabelSpace& space,
                                     const std::vector<std::string>& shipped = {},
                                     const std::string& shipped_file = {});

// With the classes taken from the train labels (`targets` (N,) int64, all inside [0, classes)):
// a warning when some of them have no training sample, naming `file`.
void warn_empty_classes(const at::Tensor& targets, int64_t classes, const std::string& file);

}  // namespace dtrain::detail
