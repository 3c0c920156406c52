// The BatchNorm running statistics averaged over the ranks (Note [BatchNorm on N ranks]).
#include "dist/batch_norm_buffers.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace dtrain::detail {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The running means and variances of (name, tensor) pairs, in their order (the same on every rank).
std::vector<at::Tensor> statistics(const NamedBuffers& named) {
  std::vector<at::Tensor> out;
  for (const auto& [name, value] : named) {
    if (!at::isFloatingType(value.scalar_type())) continue;
    if (ends_with(name, "running_mean") || ends_with(name, "running_var")) out.push_back(value);
  }
  return out;
}

NamedBuffers buffers_of(Model& model) {
  NamedBuffers out;
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

}  // namespace

bool has_batch_norm_buffers(Model& model) { return !statistics(buffers_of(model)).empty(); }

void average_batch_norm_buffers(Model& model, Communicator& comm) {
  average_batch_norm_buffers(buffers_of(model), comm);
}

void average_batch_norm_buffers(const NamedBuffers& named, Communicator& comm) {
  if (comm.world() == 1) return;
  const std::vector<at::Tensor> stats = statistics(named);
  if (stats.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  flat.reserve(stats.size());
  for (const auto& t : stats) flat.push_back(t.reshape({-1}).to(at::kDouble));
  const at::Tensor all = comm.all_gather(at::cat(flat));  // (world, values)
  // Rank by rank in order: the same sum on every rank.
  at::Tensor sum = all[0].clone();
  for (int64_t r = 1; r < all.size(0); ++r) sum.add_(all[r]);
  sum.div_(static_cast<double>(comm.world()));
  int64_t at = 0;
  for (const auto& t : stats) {
    const int64_t n = t.numel();
    t.copy_(sum.narrow(0, at, n).view(t.sizes()));
    at += n;
  }
}

}  // namespace dtrain::detail
