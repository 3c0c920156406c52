// Precompiled header for sources that need ATen but not torch::nn (comm, data, runtime).
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
