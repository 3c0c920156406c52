// What every backend checks of a collective's arguments before it is issued, so that a wrong
// call is an Error naming the collective on every rank alike, never a collective that hangs or
// writes past a buffer.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace dtrain::detail {

// Communicator::reduce_scatter_async's contract: one count per rank, none negative; the input
// 1-D, contiguous, of sum(counts) values; the output, where this rank's count is not 0, 1-D,
// contiguous, of that many values, in the input's dtype and on its device.
void check_reduce_scatter(const at::Tensor& input, const std::vector<int64_t>& counts,
                          const at::Tensor& output, int rank, int world);

}  // namespace dtrain::detail
