// What an out-of-memory error is and how it reads: the one test every recovery path asks
// (a step's, micro_batch auto's, the start-up's, dtrain bench's), and the allocator's words
// shortened for a one-line message. Depends on nothing of the loop, so that each of those paths
// includes it from below (recovery.h, start_up_memory.h, eager_step.cpp, bench/sweep.cpp).
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace dtrain::detail {

// Whether `e` is an out-of-memory error (CUDA's, the CPU allocator's, or an injected one).
bool is_out_of_memory(const std::exception& e);

// The fault injector's error: thrown instead of a real allocation failure.
struct InjectedOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An out-of-memory error in the allocator's words, short: its first sentence and, where it says
// so, the size it tried ("CUDA out of memory. Tried to allocate 28.00 MiB"), without the advice
// and the backtrace that follow.
std::string allocator_words(const std::exception& e);

}  // namespace dtrain::detail
