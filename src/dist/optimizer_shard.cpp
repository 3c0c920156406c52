#include "dist/optimizer_shard.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "dtrain/error.h"
#include "util/format.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

constexpr const char* kKey = "dist.shard_optimizer";

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& all, const std::vector<size_t>& idx) {
  std::vector<at::Tensor> out;
  for (size_t i : idx) out.push_back(all[i]);
  return out;
}

// The parameter number of a state entry ("exp_avg_sq.12": 12); -1 when it has none.
int64_t number_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size()) return -1;
  int64_t n = 0;
  for (size_t k = dot + 1; k < name.size(); ++k) {
    if (name[k] < '0' || name[k] > '9' || n > (int64_t{1} << 40)) return -1;
    n = n * 10 + (name[k] - '0');
  }
  return n;
}

// One state entry as the other ranks learn it before its values arrive.
struct EntryShape {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;
  int64_t numel = 1;
};

// "name\tdtype\td0,d1\n" per entry (state names have no tabs or newlines).
std::string describe_entries(const OptimizerState& state) {
  std::string out;
  for (const auto& [name, t] : state) {
    out += name + "\t" + std::to_string(static_cast<int>(t.scalar_type())) + "\t";
    for (int64_t d = 0; d < t.dim(); ++d) out += (d ? "," : "") + std::to_string(t.size(d));
    out += "\n";
  }
  return out;
}

std::vector<EntryShape> parse_entries(const std::string& text) {
  std::vector<EntryShape> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    EntryShape e;
    e.name = line.substr(0, a);
    e.dtype = static_cast<at::ScalarType>(std::stoi(line.substr(a + 1, b - a - 1)));
    std::istringstream dims(line.substr(b + 1));
    std::string d;
    while (std::getline(dims, d, ',')) {
      e.sizes.push_back(std::stoll(d));
      e.numel *= e.sizes.back();
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

bool shards_optimizer(const Config& cfg, int world) { return cfg.dist.shard_optimizer && world > 1; }

OptimizerShard::OptimizerShard(std::vector<at::Tensor> params, const std::vector<std::string>& names,
                               Communicator& comm)
    : params_(std::move(params)), comm_(comm), rank_(comm.rank()) {
  const int world = comm.world();
  if (static_cast<int64_t>(params_.size()) < world)
    throw Error("cannot shard the optimizer state over " + std::to_string(world) + " ranks: the model has " +
                    std::to_string(params_.size()) + " trainable parameter tensor(s), and a shard holds "
                    "whole tensors, so a rank would hold none (use at most " +
                    std::to_string(params_.size()) + " ranks, or dist.shard_optimizer=false)",
                kKey);
  for (size_t i = 1; i < params_.size(); ++i) {
    const at::Tensor& a = params_[0];
    const at::Tensor& b = params_[i];
    if (a.scalar_type() != b.scalar_type() || a.device() != b.device())
      throw Error("cannot shard the optimizer state: parameters '" + names[0] + "' (" +
                      std::string(at::toString(a.scalar_type())) + ", " + a.device().str() +
                      ") and '" + names[i] + "' (" + at::toString(b.scalar_type()) + ", " +
                      b.device().str() + ") differ, and a shard's parameters travel as one buffer",
                  kKey);
  }
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  plan_ = plan_shards(numels, world);
  buffer_ = at::zeros({plan_.largest()}, params_[0].options());
}

std::vector<at::Tensor> OptimizerShard::my_params() const { return pick(params_, mine()); }

void OptimizerShard::gather_parameters() {
  at::NoGradGuard no_grad;
  for (int r = 0; r < comm_.world(); ++r) {
    const size_t k = static_cast<size_t>(r);
    at::Tensor flat = buffer_.narrow(0, 0, plan_.elements[k]);
    const std::vector<at::Tensor> params = pick(params_, plan_.shards[k]);
    if (r == rank_) {
      std::vector<at::Tensor> pieces;  // in logical order, as the other ranks read them
      for (const auto& p : params) pieces.push_back(p.is_contiguous() ? p.view(-1) : p.contiguous().view(-1));
      compat::copy_into_flat(flat, pieces);
    }
    comm_.broadcast(flat, r);
    if (r != rank_) compat::copy_from_flat(flat, params);
  }
}

std::string OptimizerShard::describe(const Optimizer& shard) const {
  int64_t total = 0;
  for (int64_t n : plan_.elements) total += n;
  return "optimizer state sharded over " + std::to_string(comm_.world()) + " ranks: rank " +
         std::to_string(rank_) + " holds " + std::to_string(mine().size()) + " of " +
         std::to_string(params_.size()) + " parameters (" +
         std::to_string(plan_.elements[static_cast<size_t>(rank_)]) + " of " + std::to_string(total) +
         " values, " + format("%.1f", static_cast<double>(shard.state_bytes()) / (1 << 20)) +
         " MiB of state)";
}

OptimizerState gather_optimizer_state(const Optimizer& shard, Communicator& control) {
  const OptimizerState mine = shard.state();
  const std::vector<std::string> shapes = gather_strings(control, describe_entries(mine));
  // Each rank's entries as their bytes, one after another (their own dtypes: exact), to rank 0
  // alone.
  int64_t total = 0;
  for (const auto& kv : mine) total += kv.second.numel() * static_cast<int64_t>(kv.second.element_size());
  at::Tensor packed = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  int64_t end = 0;
  for (const auto& kv : mine) {
    const at::Tensor t = kv.second.detach().to(at::kCPU).contiguous();
    const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
    if (n > 0) std::memcpy(packed.data_ptr<uint8_t>() + end, t.data_ptr(), static_cast<size_t>(n));
    end += n;
  }
  const std::vector<at::Tensor> all = control.gather(packed, 0);
  OptimizerState whole;
  if (control.rank() != 0) return whole;
  for (const auto& [name, t] : mine) whole.emplace_back(name, t.detach().to(at::kCPU).clone());
  for (int r = 1; r < control.world(); ++r) {
    const at::Tensor& from = all[static_cast<size_t>(r)];
    int64_t offset = 0;
    for (const auto& e : parse_entries(shapes[static_cast<size_t>(r)])) {
      at::Tensor t = at::empty(e.sizes, at::TensorOptions().dtype(e.dtype));
      const int64_t n = e.numel * static_cast<int64_t>(t.element_size());
      if (offset + n > from.numel())
        throw Error("rank " + std::to_string(r) + "'s optimizer state is shorter than its entries say (internal error)");
      std::memcpy(t.data_ptr(), static_cast<const uint8_t*>(from.data_ptr()) + offset, static_cast<size_t>(n));
      whole.emplace_back(e.name, std::move(t));
      offset += n;
    }
  }
  std::stable_sort(whole.begin(), whole.end(), [](const auto& a, const auto& b) {
    return number_of(a.first) < number_of(b.first);
  });
  return whole;
}

OptimizerState state_of_shard(const OptimizerState& whole, const ShardPlan& plan, int rank) {
  OptimizerState out;
  for (const auto& kv : whole) {
    const int64_t n = number_of(kv.first);
    const bool planned = n >= 0 && n < static_cast<int64_t>(plan.owner.size());
    if (!planned || plan.owner[static_cast<size_t>(n)] == rank) out.push_back(kv);
  }
  return out;
}

}  // namespace dtrain::detail
