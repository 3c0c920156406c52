// What the model tests share: the built-in GPT and ResNet registered, a model built from a name,
// a config and a data spec, parameter counts, the data specs of token and image batches, a GPT
// config and its parameter count by formula.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"
#include "test_support.h"

namespace dtrain::detail {
void register_gpt_models();     // models/gpt.cpp
void register_resnet_models();  // models/resnet.cpp
}  // namespace dtrain::detail

namespace dtrain::test {

// Registering again only replaces the entries, so this is safe whether or not the built-in
// registration already includes these models.
inline void ensure_registered() {
  static const bool done = [] {
    dtrain::detail::register_gpt_models();
    dtrain::detail::register_resnet_models();
    return true;
  }();
  (void)done;
}

inline std::shared_ptr<dtrain::Model> build(const std::string& name, const dtrain::ModelConfig& cfg,
                                            const dtrain::DataSpec& spec) {
  ensure_registered();
  return dtrain::make_model(name, cfg, spec);
}

inline int64_t count_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

inline dtrain::DataSpec token_spec(int64_t seq, int64_t vocab) {
  dtrain::DataSpec s;
  s.input_shape = {seq};
  s.num_classes = vocab;
  s.input_dtype = at::kLong;
  return s;
}

inline dtrain::DataSpec image_spec(std::vector<int64_t> shape, int64_t classes) {
  dtrain::DataSpec s;
  s.input_shape = std::move(shape);
  s.num_classes = classes;
  return s;
}

inline dtrain::ModelConfig gpt_config(int64_t layers, int64_t heads, int64_t embd, int64_t vocab,
                                      int64_t seq) {
  dtrain::ModelConfig c;
  c.name = "gpt";
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = embd;
  c.vocab_size = vocab;
  c.seq_len = seq;
  return c;
}

// GPT-2 with a tied head: wte V*C + wpe T*C + per block (2 LayerNorms 4C, qkv C*3C + 3C,
// attention projection C*C + C, fc C*4C + 4C, MLP projection 4C*C + C) + final LayerNorm 2C.
inline int64_t gpt_expected_parameters(int64_t layers, int64_t embd, int64_t vocab, int64_t seq) {
  const int64_t c = embd;
  const int64_t block =
      4 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return vocab * c + seq * c + layers * block + 2 * c;
}

}  // namespace dtrain::test
