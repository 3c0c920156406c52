// Precompiled header for sources that use torch::nn or autograd internals (models, train, dist,
// hooks, cli, session, checkpoint, bench; tests and examples reuse it): parsed once per build
// instead of once per file.
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
