// Text generation with a causal language model (`dtrain predict` for GPT-style models,
// cli/predict.cpp), as nanoGPT's sample.py does it: one token at a time, the context cropped to
// the model's last `context` tokens.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "dtrain/models.h"

namespace dtrain::detail {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax; of equal logits the lowest token id)
  int64_t top_k = 0;       // > 0: sample among the top_k largest logits only
  uint64_t seed = 0;       // the CPU generator the tokens are drawn from
};

// The `max_new` tokens that follow `prompt` (token ids, not empty): the model takes (1, T) int64
// ids, T <= `context`, and returns (1, T, V) logits; the next token comes from the last
// position's. Greedy with temperature 0, else drawn from softmax(logits / temperature) (over the
// top_k largest when top_k > 0) with a CPU generator seeded with `seed`, so the same seed gives
// the same tokens. Runs on the model's `device`, no gradients, in evaluation mode; no
// collective.
std::vector<int64_t> generate(Model& model, const at::Device& device,
                              const std::vector<int64_t>& prompt, int64_t max_new, int64_t context,
                              const SamplingOptions& options);

}  // namespace dtrain::detail
