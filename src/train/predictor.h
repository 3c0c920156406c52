// The model's outputs for every sample of a dataset, spread over ranks so that the result is the
// same on any number of ranks (`dtrain predict`, cli/predict.cpp). The samples are cut into
// batches of `batch` consecutive samples, batch k computed by rank k % world: a batch holds the
// same samples whatever the world size, so each output row comes from the same computation on 1
// or N ranks (on one kind of device and build, with the same intra-op threads per rank), and the
// gathered outputs are the same, bit for bit. Not across thread counts: LibTorch's CPU kernels
// split a convolution's or a matrix product's sums by thread, so the float32 results of 1 and 2
// threads may differ in the last digits (docs/RUNNING.md gives a measurement).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "data/pixels.h"
#include "dtrain/comm.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"

namespace dtrain::detail {

// This rank's share, no collective: float (N, ...) on the CPU with the rows of this rank's
// batches filled with the model's outputs (forward in evaluation mode, no gradients, inputs
// through `pixels` on `device`), every other row 0. A dataset error (a file that does not
// decode) is thrown as it is. Leaves the model in evaluation mode.
at::Tensor local_outputs(Model& model, const Dataset& data, int64_t batch,
                         const PixelNormalizer& pixels, const at::Device& device, int rank,
                         int world);

// Every rank's local_outputs() added together over `comm` (a control communicator, CPU tensors):
// each row was filled by one rank, the others hold 0, so the sum is that rank's row exactly.
// A collective; `outputs` then holds every row on every rank (negative zeros made 0 on any
// number of ranks, as the sum makes them on several).
void gather_outputs(Communicator& comm, at::Tensor& outputs);

}  // namespace dtrain::detail
