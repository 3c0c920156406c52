#include "dist/optimizer_shard.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "dtrain/error.h"
#include "util/format.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

constexpr const char* kKey = "dist.shard_optimizer";

// A tensor's values in memory order as one flat tensor over its storage (dense tensors only:
// their values fill one block of memory from the storage offset on).
at::Tensor flat_values(const at::Tensor& t) {
  return t.detach().as_strided({t.numel()}, {1}, t.storage_offset());
}

// The kind of a state entry ("exp_avg_sq.12": "exp_avg_sq"); empty when it has no number.
std::string kind_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

std::vector<int64_t> numels_of(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> out;
  for (const auto& p : params) out.push_back(p.numel());
  return out;
}

// The state number of `rank`'s first piece: the pieces of the ranks before it.
size_t first_piece(const ShardPlan& plan, int rank) {
  size_t n = 0;
  for (int r = 0; r < rank; ++r) n += plan.pieces[static_cast<size_t>(r)].size();
  return n;
}

// The plan's pieces in one list, rank after rank: a piece's place in it is its state number.
struct NumberedPiece {
  int rank;
  ShardPiece piece;
};
std::vector<NumberedPiece> numbered(const ShardPlan& plan) {
  std::vector<NumberedPiece> out;
  for (size_t r = 0; r < plan.pieces.size(); ++r)
    for (const ShardPiece& p : plan.pieces[r]) out.push_back({static_cast<int>(r), p});
  return out;
}

// A state tensor for parameter `p` with p's shape and strides (so that its memory order is p's),
// holding `t`'s values (any layout or device) on the CPU; an Error naming the entry when the
// shapes differ.
at::Tensor like_parameter(const at::Tensor& t, const at::Tensor& p, const std::string& name) {
  if (t.sizes() != p.sizes())
    throw Error("optimizer state entry '" + name + "' has shape " + shape_str(t.sizes().vec()) +
                ", its parameter " + shape_str(p.sizes().vec()));
  at::Tensor out = at::empty_strided(p.sizes(), p.strides(), t.options().device(at::kCPU));
  out.copy_(t);
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

bool shards_optimizer(const Config& cfg, int world) {
  return cfg.dist.shard_optimizer != ShardOptimizer::kOff && world > 1;
}

OptimizerShard::OptimizerShard(std::vector<at::Tensor> params,
                               const std::vector<std::string>& names, Communicator& comm)
    : params_(std::move(params)), comm_(comm), rank_(comm.rank()) {
  const int world = comm.world();
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& a = params_[0];
    const at::Tensor& b = params_[i];
    if (a.scalar_type() != b.scalar_type() || a.device() != b.device())
      throw Error("cannot shard the optimizer state: parameters '" + names[0] + "' (" +
                      std::string(at::toString(a.scalar_type())) + ", " + a.device().str() +
                      ") and '" + names[i] + "' (" + at::toString(b.scalar_type()) + ", " +
                      b.device().str() + ") differ, and a shard's parameters travel as one buffer",
                  kKey);
    if (!b.is_non_overlapping_and_dense() || b.numel() == 0)
      throw Error("cannot shard the optimizer state: parameter '" + names[i] + "' " +
                      (b.numel() == 0 ? "has no values" : "is not one dense block of memory") +
                      ", and a shard holds flat pieces of the parameters' values",
                  kKey);
  }
  plan_ = plan_shards(numels_of(params_), world);
  if (plan_.elements(world - 1) == 0) {  // shards of ceil(total / world): the last may be empty
    int fits = world - 1;
    while (fits > 1 && plan_shards({plan_.total}, fits).elements(fits - 1) == 0) --fits;
    throw Error("cannot shard the optimizer state over " + std::to_string(world) +
                    " ranks: the model's " + std::to_string(plan_.total) +
                    " trainable values in shards of " + std::to_string(plan_.shard) +
                    " leave rank " + std::to_string(world - 1) + " none (use at most " +
                    std::to_string(fits) + " ranks, or dist.shard_optimizer=false)",
                kKey);
  }
  at::NoGradGuard no_grad;
  views_.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    for (const ShardPiece& p : plan_.pieces[static_cast<size_t>(r)])
      views_[static_cast<size_t>(r)].push_back(
          flat_values(params_[p.param]).narrow(0, p.offset, p.length));
  buffer_ = at::zeros({plan_.largest()}, params_[0].options());
}

std::unique_ptr<Optimizer> OptimizerShard::make_optimizer(const OptimizerOptions& options) const {
  const size_t first = first_piece(plan_, rank_);
  std::vector<size_t> numbers;
  std::vector<bool> decays;
  for (const ShardPiece& p : plan_.pieces[static_cast<size_t>(rank_)]) {
    numbers.push_back(first + numbers.size());
    decays.push_back(!(options.no_decay_norm_bias && params_[p.param].dim() < 2));
  }
  return std::make_unique<Optimizer>(views_[static_cast<size_t>(rank_)], options, numbers, decays);
}

void OptimizerShard::attach_gradients() {
  at::NoGradGuard no_grad;
  const std::vector<ShardPiece>& pieces = plan_.pieces[static_cast<size_t>(rank_)];
  for (size_t k = 0; k < pieces.size(); ++k) {
    const at::Tensor& p = params_[pieces[k].param];
    at::Tensor g = p.grad();
    // A gradient laid out otherwise than its parameter (autograd lays them out alike for dense
    // parameters) is copied into the parameter's layout, so that its memory order is the same.
    if (g.defined() && g.strides() != p.strides())
      g = at::empty_strided(p.sizes(), p.strides(), g.options()).copy_(g);
    views_[static_cast<size_t>(rank_)][k].mutable_grad() =
        g.defined() ? flat_values(g).narrow(0, pieces[k].offset, pieces[k].length) : at::Tensor();
  }
}

void OptimizerShard::attach_gradients(const at::Tensor& shard_gradients) {
  at::NoGradGuard no_grad;
  if (shard_gradients.numel() < plan_.elements(rank_))
    throw Error("the gradient shard has " + std::to_string(shard_gradients.numel()) +
                " values, rank " + std::to_string(rank_) + "'s shard " +
                std::to_string(plan_.elements(rank_)) + " (internal error)");
  std::vector<at::Tensor>& mine = views_[static_cast<size_t>(rank_)];
  int64_t at = 0;  // the pieces follow one another in the shard
  for (size_t k = 0; k < mine.size(); ++k) {
    const int64_t n = mine[k].numel();
    mine[k].mutable_grad() = shard_gradients.narrow(0, at, n);
    at += n;
  }
}

void OptimizerShard::gather_parameters() {
  at::NoGradGuard no_grad;
  for (int r = 0; r < comm_.world(); ++r) {
    const size_t k = static_cast<size_t>(r);
    const int64_t n = plan_.elements(r);
    if (n == 0) continue;
    at::Tensor flat = buffer_.narrow(0, 0, n);
    if (r == rank_) compat::copy_into_flat(flat, views_[k]);
    comm_.broadcast(flat, r);
    if (r != rank_) compat::copy_from_flat(flat, views_[k]);
  }
}

void OptimizerShard::gather_through(const at::Tensor& buffer) {
  if (!buffer.defined()) return;
  if (buffer.dim() != 1 || !buffer.is_contiguous() || buffer.numel() < plan_.largest() ||
      buffer.scalar_type() != buffer_.scalar_type() || buffer.device() != buffer_.device())
    throw Error("OptimizerShard: a gather buffer of " + std::to_string(buffer.numel()) +
                " values for shards of " + std::to_string(plan_.largest()) + " (internal error)");
  buffer_ = buffer;
}

std::string OptimizerShard::describe(const Optimizer& shard) const {
  const int64_t lo = rank_ * plan_.shard, n = plan_.elements(rank_);
  const size_t pieces = plan_.pieces[static_cast<size_t>(rank_)].size();
  return "optimizer state sharded over " + std::to_string(comm_.world()) + " ranks: rank " +
         std::to_string(rank_) + " holds values " + std::to_string(lo) + "-" +
         std::to_string(lo + n - 1) + " of " + std::to_string(plan_.total) + " (" +
         (pieces == 1 ? std::string("a piece of 1 parameter")
                      : "pieces of " + std::to_string(pieces) + " parameters") +
         ", " + format("%.1f", static_cast<double>(shard.state_bytes()) / (1 << 20)) +
         " MiB of state)";
}

OptimizerState gather_optimizer_state(const Optimizer& shard, const std::vector<at::Tensor>& params,
                                      Communicator& control) {
  const OptimizerState mine = shard.state();
  const std::vector<std::string> shapes = gather_strings(control, describe_entries(mine));
  // Each rank's entries as their bytes, one after another (their own dtypes: exact), to rank 0
  // alone.
  int64_t total = 0;
  for (const auto& kv : mine)
    total += kv.second.numel() * static_cast<int64_t>(kv.second.element_size());
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
  // The pieces' entries by name, from every rank.
  std::map<std::string, at::Tensor> pieces;
  for (const auto& [name, t] : mine) pieces[name] = t.detach().to(at::kCPU).clone();
  for (int r = 1; r < control.world(); ++r) {
    const at::Tensor& from = all[static_cast<size_t>(r)];
    int64_t offset = 0;
    for (const auto& e : parse_entries(shapes[static_cast<size_t>(r)])) {
      at::Tensor t = at::empty(e.sizes, at::TensorOptions().dtype(e.dtype));
      const int64_t n = e.numel * static_cast<int64_t>(t.element_size());
      if (offset + n > from.numel())
        throw Error("rank " + std::to_string(r) +
                    "'s optimizer state is shorter than its entries say (internal error)");
      std::memcpy(t.data_ptr(), static_cast<const uint8_t*>(from.data_ptr()) + offset,
                  static_cast<size_t>(n));
      pieces[e.name] = std::move(t);
      offset += n;
    }
  }
  return whole_optimizer_state(pieces, params, control.world(), "the gathered shards");
}

OptimizerState state_of_shard(const OptimizerState& whole, const std::vector<at::Tensor>& params,
                              const ShardPlan& plan, int rank) {
  const size_t first = first_piece(plan, rank);
  const std::vector<ShardPiece>& pieces = plan.pieces[static_cast<size_t>(rank)];
  OptimizerState out;
  for (const auto& [name, t] : whole) {
    const int64_t i = number_of(name);
    const std::string kind = kind_of(name);
    const bool known =
        kind == "momentum" || kind == "exp_avg" || kind == "exp_avg_sq" || kind == "step";
    if (!known || i < 0 || i >= static_cast<int64_t>(params.size())) {
      out.emplace_back(name, t);  // load_state() refuses it by name
      continue;
    }
    const at::Tensor& p = params[static_cast<size_t>(i)];
    at::Tensor flat;  // the entry's values in its parameter's memory order, made once
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (pieces[k].param != static_cast<size_t>(i)) continue;
      const std::string piece_name = kind + "." + std::to_string(first + k);
      if (kind == "step") {
        out.emplace_back(piece_name, t);
        continue;
      }
      if (!flat.defined()) flat = flat_values(like_parameter(t, p, name));
      out.emplace_back(piece_name, flat.narrow(0, pieces[k].offset, pieces[k].length));
    }
  }
  return out;
}

OptimizerState whole_optimizer_state(const std::map<std::string, at::Tensor>& pieces,
                                     const std::vector<at::Tensor>& params, int world,
                                     const std::string& where) {
  // Put each parameter's entries together from its pieces, in the order one optimizer over every
  // parameter lists them (Optimizer::state()).
  const ShardPlan plan = plan_shards(numels_of(params), world);
  const std::vector<NumberedPiece> all_pieces = numbered(plan);
  std::vector<std::vector<size_t>> of_param(params.size());  // piece numbers, in flat order
  for (size_t n = 0; n < all_pieces.size(); ++n) of_param[all_pieces[n].piece.param].push_back(n);
  auto piece = [&](const std::string& name) -> const at::Tensor& {
    const auto it = pieces.find(name);
    if (it == pieces.end())
      throw Error("the optimizer state of a shard lacks entry " + name + " (" +
                      std::to_string(all_pieces.size()) + " pieces over " + std::to_string(world) +
                      " ranks)",
                  where);
    return it->second;
  };
  auto has = [&](const std::string& kind) { return pieces.count(kind + ".0") > 0; };
  OptimizerState whole;
  auto assemble = [&](const std::string& kind, size_t i) {
    const std::string first = kind + "." + std::to_string(of_param[i].front());
    if (kind == "step") return piece(first);  // alike in every piece of a parameter
    at::Tensor out =
        at::empty_strided(params[i].sizes(), params[i].strides(), piece(first).options());
    const at::Tensor flat = flat_values(out);
    for (size_t n : of_param[i]) {
      const ShardPiece& p = all_pieces[n].piece;
      flat.narrow(0, p.offset, p.length).copy_(piece(kind + "." + std::to_string(n)));
    }
    return out;
  };
  auto add_all = [&](const std::vector<std::string>& kinds) {
    for (size_t i = 0; i < params.size(); ++i)
      for (const auto& kind : kinds)
        whole.emplace_back(kind + "." + std::to_string(i), assemble(kind, i));
  };
  if (has("momentum")) add_all({"momentum"});
  if (has("exp_avg")) {
    add_all({"exp_avg", "exp_avg_sq", "step"});
  } else if (has("step")) {
    add_all({"step"});
  }
  return whole;
}

}  // namespace dtrain::detail
