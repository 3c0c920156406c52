// Replicas: before training, every rank must hold the same config, the same model (parameter
// names, shapes, dtypes, in order) and datasets of the same sizes, and then start from rank 0's
// values. Free functions, apart from the reducer that keeps the replicas in step afterwards.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm.h"

namespace dtrain::detail {

// Throws a dtrain::Error that names the first difference with both ranks' values: the config
// hashes, the first parameter that differs ("fc1.weight [9, 16] Float" on rank 0 against ...),
// or the dataset sizes (test_size -1: no test split). Collective over `control`.
void verify_replicas(Communicator& control, uint64_t config_hash,
                     const std::vector<std::string>& names, const std::vector<at::Tensor>& params,
                     int64_t train_size, int64_t test_size);

// Rank 0's parameters and buffers to every rank, over `comm` (tensors in another memory layout,
// such as channels-last, travel as a contiguous copy).
void broadcast_parameters(Communicator& comm, torch::nn::Module& model);

}  // namespace dtrain::detail
