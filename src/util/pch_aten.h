// Precompiled header for the library's sources that need ATen but not torch::nn (runtime, the
// MPI communicator, data, optim, cuda's LibTorch wrappers, the profiler: CMakeLists.txt's tiers).
#pragma once
#include <ATen/ATen.h>
#include <mpi.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
