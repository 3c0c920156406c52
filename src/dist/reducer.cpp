#include "dist/reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <numeric>

#include "dtrain/error.h"
#include "dtrain/log.h"
#include "util/torch_compat.h"

namespace dtrain::detail {

// Shared between the reducer and its hooks: a hook that fires after the reducer is gone (a
// backward on a model that outlived its trainer) does nothing.
struct Reducer::State {
  std::mutex mu;
  Reducer* reducer = nullptr;
};

struct Reducer::Hook : torch::autograd::FunctionPostHook {
  Hook(std::shared_ptr<State> state, size_t index) : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->reducer) state_->reducer->on_ready(index_);
    return outputs;
  }
  std::shared_ptr<State> state_;
  size_t index_;
};

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, Communicator& comm,
                 Communicator& control, ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      comm_(comm),
      control_(control),
      options_(options),
      state_(std::make_shared<State>()) {
  if (params_.size() != names_.size()) throw Error("Reducer: one name per parameter");
  state_->reducer = this;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].requires_grad())
      throw Error("Reducer: parameter '" + names_[i] + "' needs no gradient");
    if (!params_[i].is_leaf()) throw Error("Reducer: parameter '" + names_[i] + "' is not a leaf");
  }
  // Until the first step shows the real order, expect gradients in reverse registration order
  // (the last layer's gradients are computed first). Reduce-scattered buckets keep that order.
  std::vector<size_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), size_t{0});
  if (options_.shard_values > 0) {
    options_.rebuild_after_first_step = false;
    const at::Tensor& p = params_.front();
    const at::ScalarType dt =
        options_.comm_dtype == at::ScalarType::Undefined ? p.scalar_type() : options_.comm_dtype;
    const int64_t S = options_.shard_values;
    if (!releases_buckets() && dt == p.scalar_type()) {
      // Note [gradient shard in the buckets]
      all_buckets_ = at::zeros({S * comm_.world()}, p.options());
      shard_received_ = all_buckets_.narrow(0, comm_.rank() * S, S);
    } else {
      shard_received_ = at::zeros({S}, p.options().dtype(dt));
    }
    shard_grad_ = dt == p.scalar_type() ? shard_received_ : at::zeros({S}, p.options());
  }
  build(order);
}

Reducer::~Reducer() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->reducer = nullptr;
}

void Reducer::build(const std::vector<size_t>& order) {
  std::vector<int64_t> bytes;
  std::vector<at::ScalarType> dtypes;
  for (const auto& p : params_) {
    bytes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
    dtypes.push_back(p.scalar_type());
  }
  buckets_ = plan_buckets(bytes, dtypes, order, options_.first_bucket_cap_bytes,
                          options_.bucket_cap_bytes);
  flat_start_.clear();
  if (options_.shard_values > 0) {
    // Consecutive parameters (the order is the reverse of theirs), laid out in their own order:
    // the bucket is the flat sequence's values from its first parameter's on.
    std::vector<int64_t> start(params_.size() + 1, 0);
    for (size_t i = 0; i < params_.size(); ++i) start[i + 1] = start[i] + params_[i].numel();
    for (auto& bucket : buckets_) {
      std::sort(bucket.begin(), bucket.end());
      for (size_t k = 1; k < bucket.size(); ++k)
        if (bucket[k] != bucket[k - 1] + 1)
          throw Error(
              "Reducer: a sharded bucket of parameters that are not consecutive (internal error)");
      flat_start_.push_back(start[bucket.front()]);
    }
  }
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  flat_.clear();
  layout_.clear();
  numel_.clear();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t numel = 0;
    for (size_t i : buckets_[b]) {
      bucket_of_[i] = b;
      offset_of_[i] = static_cast<size_t>(numel);
      numel += params_[i].numel();
    }
    const at::Tensor& first = params_[buckets_[b].front()];
    at::ScalarType dt = options_.comm_dtype == at::ScalarType::Undefined ? first.scalar_type()
                                                                         : options_.comm_dtype;
    layout_.push_back(at::empty({0}, first.options().dtype(dt)));
    numel_.push_back(numel);
    if (all_buckets_.defined())
      flat_.push_back(all_buckets_.narrow(0, flat_start_[b], numel));
    else
      flat_.push_back(releases_buckets() ? at::Tensor()
                                         : at::empty({numel}, first.options().dtype(dt)));
  }
}

at::Tensor Reducer::spare(int64_t n) const {
  const int64_t S = options_.shard_values;
  if (!all_buckets_.defined() || n > S || comm_.world() < 2)
    return at::Tensor();                                        // one rank: no other place
  return all_buckets_.narrow(0, comm_.rank() == 0 ? S : 0, n);  // another rank's shard's place
}

int64_t Reducer::bytes_per_step() const {
  int64_t bytes = 0;
  for (size_t b = 0; b < numel_.size(); ++b)
    bytes += numel_[b] * static_cast<int64_t>(layout_[b].element_size());
  return bytes;
}

int64_t Reducer::bucket_bytes() const {
  if (releases_buckets()) return 0;
  int64_t bytes = 0;
  for (size_t b = 0; b < numel_.size(); ++b)
    if (layout_[b].scalar_type() != params_[buckets_[b].front()].scalar_type())
      bytes += numel_[b] * static_cast<int64_t>(layout_[b].element_size());
  return bytes;
}

void Reducer::attach_hooks() {
  // For Note [reducer in the graph]: an AccumulateGrad node keeps the stream that was current when
  // it was made, and the reducer keeps the nodes alive. Made here, at the first backward, they take
  // the run's stream; made at construction (before a CUDA-graph run switches to its side stream)
  // they would tie every backward to the legacy default stream, which a capture refuses.
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    if (!acc) throw Error("Reducer: parameter '" + names_[i] + "' is not a leaf");
    acc->add_post_hook(std::make_unique<Hook>(state_, i));
    accumulators_.push_back(acc);  // autograd holds accumulators weakly
  }
}

void Reducer::prepare(bool sync) {
  if (accumulators_.empty()) attach_hooks();
  std::lock_guard<std::mutex> lock(mu_);
  sync_ = sync;
  if (!sync) return;
  pending_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    pending_[b] = static_cast<int64_t>(buckets_[b].size());
  ready_.assign(params_.size(), 0);
  works_.clear();
  works_.resize(buckets_.size());
  next_bucket_ = 0;
  arrival_.clear();
  timeline_.assign(buckets_.size(), BucketTiming{});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    timeline_[b].bucket = static_cast<int>(b);
    timeline_[b].bytes = numel_[b] * static_cast<int64_t>(layout_[b].element_size());
  }
  step_start_ = std::chrono::steady_clock::now();
}

void Reducer::on_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_) return;  // accumulating: gradients stay local until the last micro-batch
  if (ready_[i]) return;
  ready_[i] = 1;
  arrival_.push_back(i);
  const size_t b = bucket_of_[i];
  if (--pending_[b] == 0) {
    fill(b);
    timeline_[b].ready =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
    if (options_.overlap) launch_ready_buckets();
  }
}

at::Tensor Reducer::slot(size_t i) const {
  // The parameter's span of its bucket, laid out as the parameter is in memory (channels-last
  // weights included), so that the averaged gradient can stay there as the parameter's grad().
  const at::Tensor& p = params_[i];
  const at::Tensor& flat = flat_[bucket_of_[i]];
  const int64_t offset = flat.storage_offset() + static_cast<int64_t>(offset_of_[i]);
  if (p.is_non_overlapping_and_dense()) return flat.as_strided(p.sizes(), p.strides(), offset);
  return flat.narrow(0, static_cast<int64_t>(offset_of_[i]), p.numel()).view(p.sizes());
}

void Reducer::fill(size_t b) {
  if (releases_buckets()) {
    // The buffer lives until the bucket is sent; the gradients, once in it, are not needed.
    flat_[b] = at::empty({numel_[b]}, layout_[b].options());
    fill_buffer(b);
    for (size_t i : buckets_[b]) params_[i].mutable_grad() = at::Tensor();
    return;
  }
  fill_buffer(b);
  // The gradients are in the bucket now: each grad() becomes its span at once (Note [bucket
  // views]), not at the end of backward, so that autograd's gradient and its copy in the bucket
  // are not both kept while backward goes on: a whole model's gradients less at the step's peak.
  // The span holds the local gradient until the collective averages it in place (all-reduce); a
  // reduce-scatter leaves it local, and finish() lets it go. A bucket of another dtype
  // (dist.grad_dtype) cannot be the grad(): autograd's is kept and finish() copies back.
  for (size_t i : buckets_[b]) {
    if (flat_[b].scalar_type() != params_[i].scalar_type()) break;
    params_[i].mutable_grad() = slot(i);
  }
}

void Reducer::fill_buffer(size_t b) {
  // One multi-tensor copy per bucket (Note [bucket views]); a gradient that already is its slot
  // is not copied, a missing one is zeros.
  std::vector<at::Tensor> pieces;
  bool simple = true;
  for (size_t i : buckets_[b]) {
    const at::Tensor& g = params_[i].grad();
    const at::Tensor& p = params_[i];
    if (!g.defined() || g.scalar_type() != flat_[b].scalar_type() || g.strides() != p.strides() ||
        !g.is_non_overlapping_and_dense() || g.is_alias_of(flat_[b])) {
      simple = false;
      break;
    }
    pieces.push_back(g.as_strided({g.numel()}, {1}, g.storage_offset()));
  }
  if (simple) {
    compat::copy_into_flat(flat_[b], pieces);
    return;
  }
  for (size_t i : buckets_[b]) {
    const at::Tensor& g = params_[i].grad();
    at::Tensor s = slot(i);
    if (!g.defined())
      s.zero_();
    else if (!(g.is_alias_of(flat_[b]) && g.data_ptr() == s.data_ptr() &&
               g.strides() == s.strides()))
      s.copy_(g);
  }
}

void Reducer::launch_ready_buckets() {
  // Strictly in plan order, so every rank issues the same collectives in the same order.
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) launch(next_bucket_++);
}

void Reducer::launch(size_t b) {
  timeline_[b].launched =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
  if (options_.shard_values == 0) {
    works_[b] = comm_.all_reduce_async(flat_[b], ReduceOp::kAvg);
    return;
  }
  // The bucket's values [lo, hi) of the flat sequence: rank r's segment is their overlap with
  // its shard [r S, (r + 1) S); this rank's lands at its place in the shard.
  const int64_t S = options_.shard_values, lo = flat_start_[b], hi = lo + flat_[b].numel();
  std::vector<int64_t> counts(static_cast<size_t>(comm_.world()));
  for (int r = 0; r < comm_.world(); ++r)
    counts[static_cast<size_t>(r)] =
        std::max<int64_t>(0, std::min(hi, (r + 1) * S) - std::max(lo, r * S));
  const int me = comm_.rank();
  at::Tensor mine;
  if (counts[static_cast<size_t>(me)] > 0)
    mine =
        shard_received_.narrow(0, std::max(lo, me * S) - me * S, counts[static_cast<size_t>(me)]);
  works_[b] = comm_.reduce_scatter_async(flat_[b], counts, mine, ReduceOp::kAvg);
  // Sent: the collective holds what it reads (NCCL: the buffer is tied to its stream; MPI: its
  // thread keeps the tensor), so the buffer may go.
  if (releases_buckets()) flat_[b] = at::Tensor();
}

void Reducer::finish(bool abandon) {
  if (abandon) {
    bool synced;
    {
      std::lock_guard<std::mutex> lock(mu_);
      synced = sync_;
    }
    if (!synced) prepare(true);  // failed before the last backward began: nothing launched yet
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!sync_) throw Error("Reducer::finish() after a backward that was not synchronized");
  backward_end_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
  // Parameters whose hooks never fired got no gradient in this step.
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) missing.push_back(i);
  if (!missing.empty()) {
    if (!options_.find_unused_parameters && !abandon) {
      std::string names;
      for (size_t k = 0; k < missing.size() && k < 5; ++k)
        names += (k ? ", " : "") + names_[missing[k]];
      if (missing.size() > 5) names += ", ... (" + std::to_string(missing.size()) + " in all)";
      throw Error("parameter(s) received no gradient in this step: " + names +
                      "; if the model leaves parameters unused on purpose, set "
                      "dist.find_unused_parameters=true",
                  "dist.find_unused_parameters");
    }
    for (size_t i : missing) {
      // Contribute zeros (other ranks may have used it: the average stays right).
      ready_[i] = 1;
      const size_t b = bucket_of_[i];
      params_[i].mutable_grad() = at::Tensor();
      if (--pending_[b] == 0) {
        fill(b);
        timeline_[b].ready = backward_end_;
      }
    }
  }
  launch_ready_buckets();
  if (next_bucket_ != buckets_.size())
    throw Error("Reducer: buckets left unlaunched (internal error)");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    works_[b]->wait();
    timeline_[b].done =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
    if (options_.shard_values > 0) {
      // The averaged values are in this rank's shard alone; the local gradients go (their values
      // are in the bucket).
      for (size_t i : buckets_[b]) params_[i].mutable_grad() = at::Tensor();
      continue;
    }
    for (size_t i : buckets_[b]) {
      // grad() becomes a view of the averaged bucket (Note [bucket views]); only a bucket of
      // another dtype (dist.grad_dtype) is copied back.
      at::Tensor s = slot(i);
      at::Tensor& g = params_[i].mutable_grad();
      if (s.scalar_type() == params_[i].scalar_type()) {
        g = s;
      } else {
        if (!g.defined() || g.scalar_type() != params_[i].scalar_type())
          g = at::empty_like(params_[i]);
        g.copy_(s);
      }
    }
  }
  works_.clear();
  sync_ = false;
  if (shard_grad_.defined() && !shard_grad_.is_same(shard_received_))
    shard_grad_.copy_(shard_received_);

  if (abandon) return;  // this step is thrown away; plan again after a real one
  if (first_step_ && options_.rebuild_after_first_step) {
    first_step_ = false;
    // Re-plan in the order gradients arrived on rank 0 (parameters that never arrived go last).
    std::vector<int64_t> order(arrival_.begin(), arrival_.end());
    for (size_t i : missing) order.push_back(static_cast<int64_t>(i));
    at::Tensor t = at::tensor(order, at::kLong);
    control_.broadcast(t, 0);  // Note [control and data planes]
    std::vector<size_t> new_order(params_.size());
    auto acc = t.accessor<int64_t, 1>();
    for (size_t k = 0; k < new_order.size(); ++k) new_order[k] = static_cast<size_t>(acc[k]);
    build(new_order);
    ++rebuilds_;
  }
  first_step_ = false;
}

}  // namespace dtrain::detail
