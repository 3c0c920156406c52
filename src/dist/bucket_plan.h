// The bucket plan: which parameters' gradients travel together, as a pure function of their
// sizes, dtypes and expected arrival order (the reducer executes the plan; PyTorch's DDP splits
// the two the same way).
// Invariant (tests/unit/test_bucket_plan.cpp): the same inputs give the same plan on every rank.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace dtrain::detail {

// Group parameters into buckets. `bytes[i]` and `dtypes[i]` describe parameter i; `order` is the
// order in which gradients are expected to become ready (every index once). A bucket is closed
// once it holds at least its cap (the first bucket: `first_cap`, the others: `cap`), or when the
// next parameter has another dtype. Returns the buckets, each a list of parameter indices.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes,
                                              const std::vector<at::ScalarType>& dtypes,
                                              const std::vector<size_t>& order, int64_t first_cap,
                                              int64_t cap);

}  // namespace dtrain::detail
