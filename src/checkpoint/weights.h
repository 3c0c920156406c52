// Weights for Python: a model's parameters and buffers as the file that Python's
// torch.save(model.state_dict(), path) writes, under the names of the model's PyTorch twin
// (python/dtrain_models.py), and back. Python opens dtrain's file with torch.load(path) and
// twin.load_state_dict(sd) (strict); dtrain loads a twin's torch.save'd state_dict with
// load_weights (model.init_weights).
// Note [weight names]: dtrain's built-in models name their modules as dtrain's code has them;
// where the twin's names differ, weights.cpp maps them, in one table keyed by the model's
// Module::name() (set by each built-in model): mlp fc{i} <-> layers.{i}; cnn conv{i} <->
// convs.{i} and bn{i} <-> norms.{i}; gpt <name> <-> transformer.<name>, plus lm_head.weight, the
// head tied to transformer.wte.weight. linear, resnet18/50 and a user's own models keep their
// names.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "dtrain/models.h"
#include "util/fs.h"

namespace dtrain::detail {

// The file's bytes: every parameter and buffer (BatchNorm running statistics and
// num_batches_tracked included) under the twin's names, as CPU contiguous tensors.
std::string weights_bytes(Model& model);
// The same of a copy of the model's tensors: `tensors` as named_parameters() then named_buffers()
// give them (dtrain's names) of a model whose Module::name() is `model_kind`.
std::string weights_bytes(const std::string& model_kind,
                          const std::vector<std::pair<std::string, at::Tensor>>& tensors);
// The same bytes, handed to `out` as they are made (a file streamed: util/fs.h).
void weights_to(const std::string& model_kind,
                const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                const ByteSink& out);

// The model's tensors as weights_bytes(model_kind, tensors) takes them: named_parameters() then
// named_buffers(), dtrain's names, the model's own tensors (not copies).
std::vector<std::pair<std::string, at::Tensor>> weight_tensors(Model& model);

// weights_bytes, written atomically (readers see the old file or the new one).
void save_weights(Model& model, const std::string& path);

// Copies a state_dict file (torch.save in Python, or save_weights) into the model, strictly:
// a missing or unexpected key, a different shape or dtype, lm_head.weight not equal to
// transformer.wte.weight (gpt), or a file that is not a torch.save dict of tensors is a
// dtrain::Error naming the file and the key (with both shapes or dtypes). Nothing is copied
// unless everything matches.
void load_weights(Model& model, const std::string& path);

}  // namespace dtrain::detail
