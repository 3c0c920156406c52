// Precompiled header for sources that use torch::nn and torch::optim (models, trainer, CLI,
// tests, examples): parsed once per build instead of once per file.
#pragma once
#include <ATen/ATen.h>
#include <mpi.h>
#include <torch/nn.h>
#include <torch/optim.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
