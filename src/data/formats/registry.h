// The data formats as dtrain reads them: each format's file in src/data/formats/ registers, under
// its data.format name, how it makes a run's splits (and `dtrain eval`'s test split where it can
// make it apart from the training files), the config key behind each preprocess.json field it
// fills, and how `dtrain predict` reads its inputs. make_datasets(), preprocess.json and
// `dtrain predict` look the format up here; the config's half of a format is its row in
// src/config/data_formats.cpp.
//
// Note [data formats]: a format has two halves, one on each side of the folder order. What the
// config knows of it (its name, the data.* keys a run of it reads, the defaults it derives) is
// its row in src/config/data_formats.cpp: a config is parsed, checked and resolved in config/,
// which sits below data/ and cannot look anything up here. How it reads (its splits, its
// preprocess.json keys, its predict reader) is one FormatRegistration under the same name, made by
// the format's own file (`<file>_formats()`, which registry.cpp lists in --help's order). Nothing
// else names a format: the schema's data.* rows say .by_format() and the formats list the keys they
// read, as models list theirs; make_datasets(), preprocess.json and `dtrain predict` look it up.
// tests/unit/test_data_formats.cpp holds both halves to the same names, and test_tree.cpp finds
// no source outside this folder asking which format a config has. A new format is its file
// here with its registration and a line in registry.cpp, its row in data_formats.cpp, and
// schema rows for keys of its own.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/formats/inputs.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"

namespace dtrain::detail {

struct FormatRegistration {
  std::string name;  // its data.format
  // A run's train and test splits (the test split null when the config names none), for a rank
  // computing on `device`; the training split's statistics come from its own files.
  std::function<Splits(const DataConfig& cfg, int64_t seed, const at::Device& device)> make_splits;
  // `dtrain eval`'s test split (null when the config names none), preprocessed with `recorded`,
  // the DataSpec of the run's preprocess.json, the training files unread where it can. Empty:
  // make_splits()'s, for a format whose test split owes nothing to its training files.
  std::function<std::shared_ptr<Dataset>(const DataConfig& cfg, const DataSpec& recorded,
                                         int64_t seed)>
      recorded_test_split;
  // The config keys behind preprocess.json's fields where this format's differ from the keys all
  // formats share (preprocess.cpp): a field's JSON pointer, or a parent of it ("/pixels"), and
  // the keys; the first entry that matches wins.
  std::vector<std::pair<std::string, std::string>> preprocess_keys;
  // Its images are standardized on the host with one mean and std for every pixel of x / 255
  // (InputRecipe::mean, std), which preprocess.json records as its pixels (idx).
  bool host_pixels = false;
  // preprocess.json records its evaluation transform, the resize and the center crop (image
  // folders, Note [image transforms]).
  bool eval_transform = false;
  // `dtrain predict` for a classifier or a regression model: the inputs in the file or folder
  // `path` names, preprocessed as the run's (data/formats/inputs.h). Empty: predict reads none.
  std::function<PredictInputs(const std::string& path, const DataSpec& spec, const DataConfig& cfg)>
      predict_inputs;
  // `dtrain predict` for a language model: a prompt's token ids from its text (an Error naming
  // `where`, the prompt's source, for text that is not a prompt of this format or a token id not
  // below `vocab`), and the text of token ids. Empty: not a language format.
  std::function<std::vector<int64_t>(const std::string& text, int64_t vocab,
                                     const std::string& where)>
      prompt_tokens;
  std::function<std::string(const std::vector<int64_t>& ids)> token_text;
};

// Registers (or replaces) the format of `r.name`: a format beside the built-ins (tests), which
// are there from the first call of any of these functions.
void register_format(FormatRegistration r);
// The registration of `f`: an Error naming data.format for a name no format has.
FormatRegistration registered_format(DataFormat f);
// The names registered, in the order of registration (the built-ins: --help's).
std::vector<std::string> registered_format_names();

}  // namespace dtrain::detail
