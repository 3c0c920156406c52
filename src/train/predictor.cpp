#include "train/predictor.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace dtrain::detail {

at::Tensor local_outputs(Model& model, const Dataset& data, int64_t batch,
                         const PixelNormalizer& pixels, const at::Device& device, int rank,
                         int world) {
  const int64_t n = data.size(), bs = std::max<int64_t>(1, batch);
  model.eval();
  at::NoGradGuard no_grad;
  at::Tensor outputs;
  for (int64_t k = rank, first = k * bs; first < n; k += world, first = k * bs) {
    std::vector<int64_t> indices(static_cast<size_t>(std::min(bs, n - first)));
    std::iota(indices.begin(), indices.end(), first);
    const Batch b = data.get(indices);
    const at::Tensor out = model.forward(pixels(b.inputs.to(device))).to(at::kCPU, at::kFloat);
    if (!outputs.defined()) {
      std::vector<int64_t> shape = out.sizes().vec();
      shape[0] = n;
      outputs = at::zeros(shape, at::kFloat);
    }
    outputs.narrow(0, first, out.size(0)).copy_(out);
  }
  return outputs;
}

void gather_outputs(Communicator& comm, at::Tensor& outputs) {
  // A rank without a batch does not know the outputs' shape: the largest rank's shape is agreed
  // first (every rank with a batch has the same).
  const int64_t dims = 8;
  at::Tensor shape = at::zeros({dims}, at::kLong);
  if (outputs.defined())
    for (int64_t d = 0; d < outputs.dim() && d < dims; ++d) shape[d] = outputs.size(d);
  comm.all_reduce(shape, ReduceOp::kMax);
  if (!outputs.defined()) {
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < dims && shape[d].item<int64_t>() > 0; ++d)
      sizes.push_back(shape[d].item<int64_t>());
    outputs = at::zeros(sizes, at::kFloat);
  }
  comm.all_reduce(outputs, ReduceOp::kSum);
  outputs.add_(0.0);  // -0 + 0 is 0: a row's negative zeros read the same on 1 rank as on N
}

}  // namespace dtrain::detail
