// The smallest GPT the tests train (2 blocks of 2 heads, 16 wide, a vocabulary of 32, windows of
// 8 tokens) on synthetic tokens of the same sizes, as command-line overrides of a synthetic
// config: a test adds its sizes, its steps and what it varies.
#pragma once

#include <string>
#include <vector>

namespace dtrain::test {

inline const std::vector<std::string> kTinyGpt = {"model.name=gpt",
                                                  "model.n_layer=2",
                                                  "model.n_head=2",
                                                  "model.n_embd=16",
                                                  "model.vocab_size=32",
                                                  "model.seq_len=8",
                                                  "data.synthetic_task=tokens",
                                                  "data.synthetic_shape=[8]",
                                                  "data.synthetic_classes=32"};

}  // namespace dtrain::test
