// OptimizerShard: the optimizer state sharded over the ranks (dist.shard_optimizer, ZeRO-1).
//
// Note [sharded optimizer]: every rank keeps the optimizer state (moments, momentum buffers, step
// counts) of its shard of the parameters only: whole tensors, planned by plan_shards()
// (dist/shard_plan.h) alike on every rank. The gradients are still all-reduced by the gradient
// engine, bucket by bucket during backward, so every rank holds the whole averaged gradient:
// the loss scaler's unscale and non-finite check, the skip and the clipping by the global norm
// run on every parameter, unchanged, and decide alike on every rank. Then each rank's Optimizer
// (built over its shard, numbering the state by the model's parameter indices) updates its
// shard, and gather_parameters() brings every shard's new values to every rank, one broadcast
// per rank from the shard's owner on the data plane (NCCL on GPUs; captured with the rest of the
// step in a CUDA graph, Note [reducer in the graph]), so every rank starts the next forward from
// the same parameters. The broadcasts share one buffer of the largest shard's size (1/N of the
// parameters), where one all_gather would hold N padded shards at once, all the parameters
// again.
// The parameters, their gradients and the buckets are not sharded: only the state is. A skipped
// step updates nothing on any rank and gathers nothing. Checkpoints hold the whole state, as one
// optimizer over all the parameters writes it (gather_optimizer_state() collects it on rank 0),
// so a sharded checkpoint resumes on any number of ranks, sharded or not; on resume each rank
// loads its shard's entries (state_of_shard()).
#pragma once

#include <ATen/ATen.h>

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
  // Error naming dist.shard_optimizer when they cannot be sharded: fewer parameter tensors than
  // ranks (a rank would hold none), or parameters of more than one dtype or device (a shard
  // travels as one buffer).
  OptimizerShard(std::vector<at::Tensor> params, const std::vector<std::string>& names,
                 Communicator& comm);

  const ShardPlan& plan() const { return plan_; }
  int rank() const { return rank_; }
  // This rank's shard: the parameters' indices (in increasing order) and the tensors.
  const std::vector<size_t>& mine() const { return plan_.shards[static_cast<size_t>(rank_)]; }
  std::vector<at::Tensor> my_params() const;

  // After this rank's optimizer step: every rank's shard to every rank, on the data plane: for
  // each rank in turn, its owner flattens its parameters into the buffer, broadcasts it, and the
  // other ranks copy it into their parameters. A collective: every rank calls it after the same
  // steps.
  void gather_parameters();

  // "optimizer state sharded over 4 ranks: this rank holds 3 of 6 parameters (...)".
  std::string describe(const Optimizer& shard) const;

 private:
  std::vector<at::Tensor> params_;
  Communicator& comm_;
  int rank_ = 0;
  ShardPlan plan_;
  at::Tensor buffer_;  // one shard's parameters, flattened: the largest shard's length
};

// The whole optimizer state from every rank's shard: rank 0 gets the entries of every rank's
// Optimizer::state() (CPU tensors, their dtypes and shapes kept, ordered by parameter number),
// the entries one optimizer over all the parameters has; other ranks get none. A collective over
// `control` (the CPU control plane): one gather of the entries' names and shapes, then each rank's
// state, its entries' bytes in their own dtypes, gathered to rank 0 alone (Communicator::gather):
// no other rank receives any state, and each holds one packed copy of its own while it is sent.
OptimizerState gather_optimizer_state(const Optimizer& shard, Communicator& control);

// The entries of a whole optimizer state (a checkpoint's) that belong to `rank`'s shard, for its
// Optimizer::load_state(). Entries that name no parameter of the plan (another model's, or not
// optimizer state) are kept, so that load_state() refuses them by name.
OptimizerState state_of_shard(const OptimizerState& whole, const ShardPlan& plan, int rank);

}  // namespace dtrain::detail
