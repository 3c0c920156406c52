#include "dist/data_parallel.h"

#include <utility>

namespace dtrain::detail {

DataParallel::DataParallel(std::vector<at::Tensor> params, std::vector<std::string> names,
                           Communicator& comm, Communicator& control)
    : params_(std::move(params)), names_(std::move(names)), comm_(comm), control_(control) {}

DataParallel::~DataParallel() = default;

void DataParallel::shard_optimizer() {
  shard_ = std::make_unique<OptimizerShard>(params_, names_, comm_);
}

void DataParallel::reduce(ReducerOptions options) {
  // Sharded: each rank receives the averaged gradients of its shard alone (Note [sharded
  // optimizer]).
  if (shard_) options.shard_values = shard_->plan().shard;
  reducer_ = std::make_unique<Reducer>(params_, names_, comm_, control_, options);
  // ZeRO-1 gathers the new parameters through the buckets' memory (Note [gradient shard in the
  // buckets]); its own buffer goes.
  if (shard_) shard_->gather_through(reducer_->spare(shard_->plan().largest()));
}

std::unique_ptr<Optimizer> DataParallel::make_optimizer(const OptimizerOptions& options) const {
  return shard_ ? shard_->make_optimizer(options) : std::make_unique<Optimizer>(params_, options);
}

void DataParallel::before_backward(bool last) {
  if (reducer_) reducer_->prepare(/*sync=*/last);
}

void DataParallel::after_backward(bool abandon) {
  if (reducer_) reducer_->finish(abandon);
}

const std::vector<at::Tensor>& DataParallel::update_gradients() {
  if (!shard_) return params_;
  // The reducer leaves this rank's shard of the averaged gradients; without one (one rank) each
  // piece views its parameter's whole gradient.
  if (reducer_) {
    shard_->attach_gradients(reducer_->gradient_shard());
  } else {
    shard_->attach_gradients();
  }
  return shard_->pieces();
}

const std::vector<at::Tensor>& DataParallel::update_parameters() const {
  return shard_ ? shard_->pieces() : params_;
}

Communicator* DataParallel::agreed_over() const { return shard_ ? &shard_->comm() : nullptr; }

void DataParallel::after_optimizer_step() {
  if (shard_) shard_->gather_parameters();
}

bool DataParallel::capturable() const { return !reducer_ || reducer_->capturable(); }

void DataParallel::captured() {
  if (reducer_) reducer_->forget_timeline();
}

const std::vector<BucketTiming>& DataParallel::last_timeline() const {
  static const std::vector<BucketTiming> none;
  return reducer_ ? reducer_->last_timeline() : none;
}

std::chrono::steady_clock::time_point DataParallel::last_start() const {
  return reducer_ ? reducer_->last_start() : std::chrono::steady_clock::time_point();
}

double DataParallel::last_backward_end() const {
  return reducer_ ? reducer_->last_backward_end() : 0.0;
}

StepBytes DataParallel::bytes_per_step() const {
  StepBytes b;
  if (reducer_)
    (reducer_->reduce_scatters() ? b.reduce_scatter : b.all_reduce) = reducer_->bytes_per_step();
  if (shard_)
    for (const at::Tensor& p : params_)
      b.broadcast += p.numel() * static_cast<int64_t>(p.element_size());
  return b;
}

int64_t DataParallel::bucket_bytes() const { return reducer_ ? reducer_->bucket_bytes() : 0; }

bool DataParallel::releases_buckets() const { return reducer_ && reducer_->releases_buckets(); }

OptimizerState DataParallel::own_state(const OptimizerState& whole) const {
  return shard_ ? state_of_shard(whole, params_, shard_->plan(), shard_->rank()) : whole;
}

std::string DataParallel::describe(const Optimizer& optimizer) const {
  return shard_ ? shard_->describe(optimizer) : std::string();
}

}  // namespace dtrain::detail
