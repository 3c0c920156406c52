// Reducer: averages gradients across ranks in buckets, launched from gradient-ready hooks while
// backward is still computing earlier layers (the DDP design). Over NCCL the whole step, these
// collectives included, can be captured in a CUDA graph and replayed (Note [reducer in the
// graph], train/graph_step.h); over MPI the collectives run on the host. With a sharded optimizer
// (ReducerOptions::shard_values) each bucket is reduce-scattered instead: every rank receives the
// averages of its shard of the parameters' values only (Note [sharded optimizer]).
// Invariants: the bucket plan is identical on every rank (a pure function of parameter sizes and
// an order that rank 0 decides); buckets are launched strictly in plan order on every rank, so
// collectives always match; micro-batches before the last one of a step communicate nothing; a
// parameter that gets no gradient is an error naming it, or, with dist.find_unused_parameters,
// contributes zeros to its bucket's average (its grad() is then that average, like every
// other's).
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/bucket_plan.h"
#include "dtrain/comm.h"
#include "dtrain/records.h"

namespace dtrain::detail {

struct ReducerOptions {
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  int64_t first_bucket_cap_bytes = 1024 * 1024;
  bool overlap = true;  // false: everything is launched after backward
  at::ScalarType comm_dtype = at::ScalarType::Undefined;  // Undefined: the gradient's dtype
  bool find_unused_parameters = false;
  bool rebuild_after_first_step = true;  // re-plan buckets in the order gradients arrived
  // > 0: each bucket is reduce-scattered, not all-reduced, into shards of this many values of the
  // parameters' flat sequence (dist.shard_optimizer: ShardPlan::shard; Note [sharded optimizer]).
  // The buckets then hold consecutive parameters, laid out in the flat order, in the reverse
  // order of the parameters (never re-planned), so that each bucket is one contiguous range of
  // the flat sequence and its segments go to the ranks whose shards they fall in.
  int64_t shard_values = 0;
  // With shard_values (dist.shard_optimizer=gradients, ZeRO-2): a bucket's buffer exists only
  // from its fill to its launch, and its parameters' gradients are released at the fill, so
  // during backward a rank holds the gradients and buckets not yet sent, and past it none but
  // its shard.
  bool release_buckets = false;
};

class Reducer {
 public:
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, Communicator& comm,
          Communicator& control, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward: `sync` is true for the last micro-batch of a step only. The first call
  // attaches the gradient hooks (Note [reducer in the graph]).
  void prepare(bool sync);
  // After the last backward of a step: launches what is left, waits, and leaves the averaged
  // gradient in every parameter's grad() (with shard_values: in gradient_shard(), and every
  // parameter's grad() is released). `abandon`: this rank failed during the step (out of
  // memory); it still launches every bucket (zeros where gradients are missing) so that no peer
  // waits in a collective, and the caller throws the result away.
  void finish(bool abandon = false);
  // With shard_values: this rank's shard of the averaged gradients after finish(), values
  // [rank * shard_values, (rank + 1) * shard_values) of the flat sequence (past its end: zeros),
  // in the parameters' dtype. One buffer for the run (a CUDA graph replays into it).
  const at::Tensor& gradient_shard() const { return shard_grad_; }
  // With shard_values, buckets kept and of the parameters' dtype (dist.shard_optimizer=true):
  // n values (at most shard_values) of the buckets' memory that nothing reads from the end of
  // finish() to the next backward's fill, and that are not this rank's gradient shard (Note
  // [gradient shard in the buckets]); otherwise (and on one rank) an undefined tensor.
  at::Tensor spare(int64_t n) const;

  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  // Timings of the last synchronized step (BucketTiming: seconds since its prepare()), and when
  // its backward ended.
  const std::vector<BucketTiming>& last_timeline() const { return timeline_; }
  double last_backward_end() const { return backward_end_; }
  // When the last synchronized step's backward began: the origin of last_timeline()'s times.
  std::chrono::steady_clock::time_point last_start() const { return step_start_; }
  int64_t rebuilds() const { return rebuilds_; }
  // Whether a step through this reducer can be captured in a CUDA graph (Note [reducer in the
  // graph]): its collectives are NCCL's, on the GPU. MPI's run on the host.
  bool capturable() const { return comm_.backend() == "nccl"; }
  bool releases_buckets() const { return options_.release_buckets && options_.shard_values > 0; }
  // Whether the buckets are reduce-scattered into the ranks' shards (else all-reduced), and the
  // bytes of all the buckets, what one synchronized step hands the collectives.
  bool reduce_scatters() const { return options_.shard_values > 0; }
  int64_t bytes_per_step() const;
  // The bytes of the bucket buffers kept beside the gradients: buckets of another dtype than their
  // parameters' (dist.grad_dtype), kept between steps; 0 when they are released
  // (releases_buckets()). A bucket of the parameters' dtype holds their gradients (Note [bucket
  // views]) and is counted as them.
  int64_t bucket_bytes() const;
  // Once the step is a graph, the hooks no longer run (a replay has no host side): the host-clock
  // bucket timings of the captured step say nothing about the replays, so they are dropped.
  void forget_timeline() {
    std::lock_guard<std::mutex> lock(mu_);
    timeline_.clear();
  }

 private:
  struct Hook;
  struct State;
  void attach_hooks();  // at the first prepare()
  void on_ready(size_t param);
  void fill(size_t b);                  // mu_ held: the bucket's gradients into its buffer
  void fill_buffer(size_t b);           // the copy itself
  at::Tensor slot(size_t param) const;  // the parameter's span of its bucket, shaped like it
  void launch_ready_buckets();          // mu_ held
  void launch(size_t b);                // mu_ held
  void build(const std::vector<size_t>& order);

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  Communicator& comm_;
  Communicator& control_;
  ReducerOptions options_;
  std::shared_ptr<State> state_;  // shared with the hooks; outlives the reducer if needed
  std::vector<std::shared_ptr<void>> accumulators_;  // keep AccumulateGrad nodes alive

  std::vector<std::vector<size_t>> buckets_;
  // Note [bucket views]: once all of a bucket's gradients are ready they go into its buffer in
  // one multi-tensor copy, flattened in memory order (a CUDA graph replays one kernel per copy,
  // and per-parameter copies cost about 3 us each there). Each grad() then becomes a view of its
  // span, laid out like its parameter (channels-last weights keep their strides, as the fused
  // optimizers need): at once, so that autograd's gradients go while backward still runs instead
  // of being kept beside their copies (a model's gradients less at the peak), and after the
  // all-reduce the averaged gradients are there, in place of a copy back (DDP's
  // gradient_as_bucket_view). With a sharded optimizer they go at the step's end. The next step's
  // clear_gradients() lets autograd make fresh gradients; a loop that does not clear them
  // accumulates into the views, and a gradient that already is its span is not copied again.
  std::vector<at::Tensor> flat_;    // one buffer per bucket (with release_buckets:
                                    // defined from its fill to its launch)
  std::vector<at::Tensor> layout_;  // per bucket, an empty tensor of its buffer's
                                    // dtype and device, and its values' count
  std::vector<int64_t> numel_;
  std::vector<int64_t> flat_start_;  // with shard_values: each bucket's first value in
                                     // the parameters' flat sequence
  // Note [gradient shard in the buckets]: with dist.shard_optimizer=true and buckets of the
  // parameters' dtype, every bucket is a view of one buffer of world x shard_values values laid
  // out in the flat order (its tail zeros past the last value), and this rank's gradient shard is
  // its own place in it: the reduce-scatter sums each rank's segment in place (NCCL's reduce to
  // that rank; MPI through a copy) instead of into a buffer of its own. After finish() the rest of
  // the buffer holds local gradients nothing reads again before the next backward fills it, so
  // OptimizerShard::gather_parameters() broadcasts through another rank's place in it (spare()):
  // the step's stream order puts the gather after the optimizer step and the next fill after the
  // gather, in a CUDA graph as outside one. ZeRO-1 then keeps no buffer beyond the gradients, where
  // a gradient shard and a broadcast buffer (1/N of the parameters each) ate most of what sharding
  // the state freed at 2 ranks (docs/PERFORMANCE.md). Not for ZeRO-2 (the buckets come and go)
  // nor for buckets of another dtype (dist.grad_dtype).
  at::Tensor all_buckets_;
  at::Tensor shard_received_;                  // with shard_values: the segments this rank
                                               // receives, in the buckets' dtype
  at::Tensor shard_grad_;                      // gradient_shard(): shard_received_, or its copy
                                               // in the parameters' dtype
  std::vector<size_t> bucket_of_, offset_of_;  // per parameter
  std::vector<int64_t> pending_;               // per bucket: gradients not yet ready
  std::vector<char> ready_;                    // per parameter
  std::vector<std::unique_ptr<Work>> works_;   // per bucket, this step
  size_t next_bucket_ = 0;
  bool sync_ = false;
  bool first_step_ = true;
  std::vector<size_t> arrival_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point step_start_;
  std::vector<BucketTiming> timeline_;
  double backward_end_ = 0;
  int64_t rebuilds_ = 0;
};

}  // namespace dtrain::detail
