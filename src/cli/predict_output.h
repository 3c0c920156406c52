// What `dtrain predict` writes for a classifier or a regression model (cli/predict.cpp): one
// record per input, in input order, as JSON lines (one object per line) or, for an --output
// whose name ends in .csv, CSV rows under a header.
//   classification, JSON: {"input": NAME, "top": [{"index": i, "class": "cat", "prob": p}, ...]}
//     the top_k classes by probability (softmax of the outputs), highest first (of equal ones,
//     the lower index first); "class" where the run has class names (preprocess.json's
//     class_names: image folders' folders, data.class_names, CIFAR's label-name file);
//   classification, CSV:  input,class_1,prob_1,...,class_k,prob_k (class: the name, else the index)
//   regression, JSON:     {"input": NAME, "values": {"<target>": v, ...}} ("values": [v, ...]
//     when the run has no target names); CSV: input,<target>,...
// Numbers are the float32 values with 9 significant digits (every float reads back exact). The
// text depends on the outputs alone, so equal outputs give equal bytes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/data/dataset.h"

namespace dtrain::cli {

struct PredictTable {
  const std::vector<std::string>* names = nullptr;  // one per output row
  const DataSpec* spec = nullptr;                   // classes or targets, their names
  int64_t top_k = 5;                                // classification: 0 = every class
  bool csv = false;
};

// The file's text for `outputs`: float (N, classes) logits or (N, target_dim) values.
std::string predict_text(const at::Tensor& outputs, const PredictTable& table);

}  // namespace dtrain::cli
