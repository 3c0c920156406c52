// OptimizerShard: the optimizer state sharded over the ranks (dist.shard_optimizer: true, ZeRO-1;
// gradients, ZeRO-2).
//
// Note [sharded optimizer]: every rank keeps the optimizer state (moments, momentum buffers, step
// counts) of its shard of the parameters' values only: 1/N of the flat sequence of every
// trainable parameter's values, planned by plan_shards() (dist/shard_plan.h) alike on every rank,
// so a shard holds pieces of the tensors it crosses and every rank holds the same share of the
// state whatever the tensors' sizes (a whole-tensor plan left a GPT's token embedding, 31% of
// its parameters, and its moments on one rank). Each piece is a flat view of its parameter's
// values in memory order, and the rank's Optimizer runs over the pieces (numbered by the plan,
// each with its whole parameter's weight-decay rule).
// The gradients are reduce-scattered, not all-reduced: the gradient engine's buckets hold
// consecutive parameters in the flat order (ReducerOptions::shard_values), so a bucket is one
// range of the flat sequence, and as each bucket's gradients are ready during backward it is
// reduced with each segment going to the rank whose shard it falls in
// (Communicator::reduce_scatter_async), into that rank's gradient shard
// (Reducer::gradient_shard()); the local gradients are then released. Before the step each
// piece takes its span of that shard as its gradient (attach_gradients(shard)); what needs every
// gradient is agreed over the ranks: the loss scaler's non-finite flag (the maximum), the norm
// for clipping and for the logs (the sum of the squares), so every rank skips, clips and steps
// alike. After the step, gather_parameters() brings every shard's new values to every rank, one
// broadcast per rank from the shard's owner, on the data plane (NCCL on GPUs; captured with the
// rest of the step in a CUDA graph, Note [reducer in the graph]), so every rank starts the next
// forward from the same parameters: one volume of the gradients and one of the parameters on
// the wire per step, where all-reducing the gradients (two volumes) and broadcasting made three.
// The broadcasts share one buffer of a shard's size (1/N of the parameters), where one
// all_gather would hold N shards at once, all the parameters again; with dist.shard_optimizer=true
// that buffer is the gradient buckets' memory (Note [gradient shard in the buckets]). The reduced
// values come from another collective than an unsharded run's all-reduce, so they may differ in the
// last bit where more than two ranks' values are summed (a sum's order); on two ranks they are the
// same. The parameters are not sharded: only the state and the averaged gradients are. The buckets
// hold the whole local gradient with dist.shard_optimizer=true; with =gradients (ZeRO-2) a
// bucket's buffer is made when its gradients are ready and released once it is sent, and the
// parameters' gradients go as they enter it (ReducerOptions::release_buckets), so past backward
// a rank keeps no gradient beyond its shard. A skipped step updates nothing on any rank and gathers
// nothing. Checkpoints hold the whole state, as one optimizer over all the parameters has it:
// each rank writes its own shard's entries into its rank file in parallel, and on resume
// whole_optimizer_state() puts the pieces' entries together (the plan is a pure function of the
// parameters and the writing world, so it needs no more than the model), so a sharded checkpoint
// resumes on any number of ranks, sharded or not; each rank then cuts its pieces' entries out of
// the whole state (state_of_shard()). gather_optimizer_state() gathers the same whole state to
// rank 0 over the control plane.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/shard_plan.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/optim.h"

namespace dtrain::detail {

using OptimizerState = std::vector<std::pair<std::string, at::Tensor>>;  // Optimizer::state()

// Whether a run on `world` ranks shards its optimizer state: dist.shard_optimizer and more than
// one rank (with one there is nothing to shard: build_step_context warns, naming the key, and
// builds one optimizer over every parameter).
bool shards_optimizer(const Config& cfg, int world);

class OptimizerShard {
 public:
  // Plans the shards of `params` (the trainable parameters, in the model's order; `names` for
  // messages) over comm's ranks; every rank must call it with the same parameters. Throws an
  // Error naming dist.shard_optimizer when they cannot be sharded: a rank would hold no values
  // (the last shards of ceil(total / world) values are empty: 5 values on 4 ranks leave rank 3
  // none), parameters of more than one dtype or device (a shard travels as one
  // buffer), or a parameter whose values are not one dense block of memory.
  OptimizerShard(std::vector<at::Tensor> params, const std::vector<std::string>& names,
                 Communicator& comm);

  const ShardPlan& plan() const { return plan_; }
  int rank() const { return rank_; }

  // The optimizer over this rank's pieces, numbered as the plan numbers them, each with its
  // parameter's weight-decay rule (train.no_decay_norm_bias looks at the parameter's dimensions).
  std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options) const;
  // Before a step of that optimizer, from whole gradients (each rank holding all of them, as
  // after an all-reduce): each piece's gradient is the same flat view of its parameter's gradient
  // (undefined where the parameter has none). Host work only. The training step uses the
  // overload below.
  void attach_gradients();
  // The same from this rank's shard of the averaged gradients (Reducer::gradient_shard(): the
  // flat sequence's values from rank * plan().shard on): each piece's gradient is its span of it.
  // Host work only; the spans stay valid as long as the buffer (a CUDA graph replays into it).
  void attach_gradients(const at::Tensor& shard_gradients);
  // This rank's pieces, the optimizer's parameters (their gradients as last attached), and the
  // data plane they are sharded over: the loss scaler's flag and the gradient norm are agreed
  // on it (GradScaler::unscale, clip_gradients).
  const std::vector<at::Tensor>& pieces() const { return views_[static_cast<size_t>(rank_)]; }
  Communicator& comm() const { return comm_; }

  // After this rank's optimizer step: every rank's shard to every rank, on the data plane: for
  // each rank in turn, its owner packs its pieces into the buffer, broadcasts it, and the other
  // ranks copy it into their views of those pieces. A collective: every rank calls it after the
  // same steps.
  void gather_parameters();
  // The memory gather_parameters() broadcasts through, in place of its own buffer: `buffer` (at
  // least plan().largest() values of the parameters' dtype, on their device), which nothing may
  // read between this rank's optimizer step and the next backward (Reducer::spare()). An
  // undefined tensor keeps the own buffer.
  void gather_through(const at::Tensor& buffer);

  // "optimizer state sharded over 4 ranks: rank 1 holds values 41-81 of 163 (pieces of 2
  // parameters, 0.0 MiB of state)".
  std::string describe(const Optimizer& shard) const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::vector<at::Tensor>> views_;  // per rank: its pieces, flat views of params_
                                                // (this rank's own hold their gradients)
  Communicator& comm_;
  int rank_ = 0;
  ShardPlan plan_;
  at::Tensor buffer_;  // one shard's values: the largest shard's length
};

// The whole optimizer state from every rank's shard of `params` (the trainable parameters in the
// model's order, as the shards were planned): rank 0 gets the entries one optimizer over all the
// parameters has ("exp_avg.<i>" shaped and strided as parameter i, ...; CPU tensors), other ranks
// none. A collective over `control` (the CPU control plane): one gather of the entries' names and
// shapes, then each rank's state, its entries' bytes in their own dtypes, gathered to rank 0
// alone (Communicator::gather).
OptimizerState gather_optimizer_state(const Optimizer& shard, const std::vector<at::Tensor>& params,
                                      Communicator& control);

// The whole optimizer state from the entries of every shard (each rank's Optimizer::state() of its
// pieces, "exp_avg.<n>" by piece number, all ranks' together in `pieces`, CPU tensors) of `params`
// planned over `world` ranks: the entries one optimizer over all the parameters has, in its
// order. An entry missing is an Error naming it and `where`. How a checkpoint of a sharded run,
// each rank's shard in its own file, is read back (train/resume.cpp).
OptimizerState whole_optimizer_state(const std::map<std::string, at::Tensor>& pieces,
                                     const std::vector<at::Tensor>& params, int world,
                                     const std::string& where);

// The entries of a whole optimizer state (a checkpoint's) for `rank`'s pieces in the plan of
// `params`, for its Optimizer::load_state(). Entries that name no parameter of the plan (another
// model's, or not optimizer state) are kept, so that load_state() refuses them by name.
OptimizerState state_of_shard(const OptimizerState& whole, const std::vector<at::Tensor>& params,
                              const ShardPlan& plan, int rank);

}  // namespace dtrain::detail
