// DataParallel: the gradient engine (Reducer) and the optimizer shard (OptimizerShard) of one
// rank behind one object, which the step engines, the telemetry, the memory ladder, resume and
// the loop call in the step's own terms.
//
// Note [data-parallel seam]: the reducer and the optimizer shard are one protocol, not two
// tools: with dist.shard_optimizer the buckets are laid out by the shard plan and reduce-scattered
// into the shard's gradients, the shard's update reads them, and its parameter gather goes through
// the buckets' spare memory (Note [sharded optimizer], Note [gradient shard in the buckets]); with
// one rank there is neither, and each rank's gradients are the update's. When the engines held
// both and asked each which case it was, the case analysis was spread over eight files of
// train/ and a hook (and the checkpoint writer asked the config again whether the run was
// sharded). So the engines see one object that says what to do at each point of a step: before a
// micro-batch's backward, after the backward, the gradients the update reads and the communicator
// they are agreed over, after the optimizer step; and the facts the rest of the loop reports
// (bucket timings, wire bytes, memory, whether the state is sharded, this rank's entries of a
// whole optimizer state). It is built in stages (shard, then reducer, then optimizer) so that the
// start-up can agree on running out of memory around each allocation (StartUpMemory). With
// neither part every call is a no-op or says so, and the step is one rank's alone.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/optimizer_shard.h"
#include "dist/reducer.h"
#include "dtrain/comm.h"
#include "dtrain/optim.h"
#include "dtrain/records.h"

namespace dtrain::detail {

// The bytes one synchronized step hands each kind of collective on the data plane (before the
// ring algorithms' factors): the gradient buckets' all-reduce or reduce-scatter, and with a
// sharded optimizer the updated parameters' broadcasts (all of the parameters' bytes).
struct StepBytes {
  int64_t all_reduce = 0, reduce_scatter = 0, broadcast = 0;
};

class DataParallel {
 public:
  // `params` (the trainable parameters, in the model's order) and their `names`, averaged over
  // `comm` (the data plane), with agreements over `control` (Note [control and data planes]).
  // Neither a reducer nor a shard yet: each rank's gradients are its own.
  DataParallel(std::vector<at::Tensor> params, std::vector<std::string> names, Communicator& comm,
               Communicator& control);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // --- building, in this order (each stage one allocation; none a collective) ---
  // Shards the optimizer state over comm's ranks (OptimizerShard: its Error naming
  // dist.shard_optimizer when the parameters cannot be sharded). Before reduce().
  void shard_optimizer();
  // The gradient engine over comm. With a shard, its buckets are reduce-scattered into shards of
  // the plan's size (options.shard_values is set), and the shard's parameter gather goes through
  // the buckets' spare memory where they have one (Reducer::spare(); else its own buffer).
  void reduce(ReducerOptions options);
  // The optimizer: over this rank's pieces with a shard (OptimizerShard::make_optimizer), else
  // over every parameter.
  std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options) const;

  // --- the step ---
  // Before each micro-batch's backward; `last`: the step's last, the only one that communicates
  // (Reducer::prepare). Nothing without a reducer.
  void before_backward(bool last);
  // After the step's last backward: the averaged gradients in place, or with `abandon` (this rank
  // ran out of memory) every collective still completed for the peers (Reducer::finish).
  // Nothing without a reducer.
  void after_backward(bool abandon);
  // Before the optimizer step: the optimizer's parameters, holding the step's averaged gradients.
  // With a shard, each piece's gradient is made its span of the reducer's gradient shard (host
  // work; the spans stay valid, a CUDA graph replays into them; without a reducer, the flat view
  // of its parameter's whole gradient), and the pieces are returned; else every parameter (their
  // grad() already holds the gradients).
  const std::vector<at::Tensor>& update_gradients();
  // The same parameters, their gradients as last made ready, without making them ready.
  const std::vector<at::Tensor>& update_parameters() const;
  // The communicator what reads every gradient is agreed over (the loss scaler's non-finite flag,
  // the clipping norm): the data plane with a shard, else null (each rank holds them all).
  Communicator* agreed_over() const;
  // Whether after_optimizer_step() communicates: with a shard, every shard's updated values go to
  // every rank.
  bool gathers_parameters() const { return shard_ != nullptr; }
  // After this rank's optimizer step (not after a skipped one): with a shard, every shard's new
  // values to every rank (OptimizerShard::gather_parameters, a collective); else nothing.
  void after_optimizer_step();

  // --- CUDA graphs (Note [reducer in the graph]) ---
  // Whether a step through it can be captured: no reducer, or NCCL's collectives.
  bool capturable() const;
  // The step is a graph from now on: the reducer's host-clock bucket timings are dropped.
  void captured();

  // --- facts ---
  bool reduces() const { return reducer_ != nullptr; }
  // Whether the optimizer is this rank's shard of the state, and over how many ranks the state is
  // shared (1 when not sharded).
  bool sharded() const { return shard_ != nullptr; }
  int optimizer_shards() const { return shard_ ? comm_.world() : 1; }
  // The reducer's timings of the last synchronized step (Reducer::last_timeline; empty without
  // one), their origin and when its backward ended (on the same clock).
  const std::vector<BucketTiming>& last_timeline() const;
  std::chrono::steady_clock::time_point last_start() const;
  double last_backward_end() const;
  StepBytes bytes_per_step() const;
  // The bucket buffers kept beside the gradients (Reducer::bucket_bytes; 0 without a reducer),
  // and whether the buckets and gradients are released as they are sent (ZeRO-2).
  int64_t bucket_bytes() const;
  bool releases_buckets() const;
  // This rank's entries of a whole optimizer state (a checkpoint's), for its optimizer's
  // load_state(): with a shard, its pieces' entries (state_of_shard); else the whole state.
  OptimizerState own_state(const OptimizerState& whole) const;
  // With a shard, the log's line on it (OptimizerShard::describe); else "".
  std::string describe(const Optimizer& optimizer) const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  Communicator& comm_;
  Communicator& control_;
  std::unique_ptr<OptimizerShard> shard_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace dtrain::detail
