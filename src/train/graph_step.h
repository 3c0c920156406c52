// The CUDA-graph step: after kWarmupSteps eager steps, the whole step (forward, backward, the
// gradient engine's bucketed NCCL all-reduce, clipping, the optimizer, with dist.shard_optimizer
// the shards' NCCL broadcasts of the updated parameters, the loss window) is
// captured once and every later full batch is two input copies (and a learning-rate fill when
// the rate changes) plus one graph launch, with one rank or several. Decided when training
// starts: refused off the GPU, in a build that cannot capture graphs, with a gradient engine over
// MPI (host collectives), with a loss scaler (fp16, or train.skip_nonfinite: a host decision per
// step), without a capturable optimizer, with blocks recomputed in backward that draw random
// numbers (Note [activation checkpointing]), and with a fault injector; when one rank refuses,
// every rank does. `on` turns a refusal into an Error naming train.cuda_graph. A capture that fails
// on any rank falls back to eager steps on every rank (`auto`; `on`: an Error).
//
// Note [reducer in the graph]: the gradient engine's hooks fire during the captured backward,
// so the bucket copies, the event that orders the communication stream after them, each
// ncclAllReduce and the copies back are all captured (NCCL supports stream capture since 2.9;
// the communication stream joins the capture through the event it waits on). Replays run that
// sequence with no host side at all. Every rank captures at the same step (warm-up is a fixed
// number of full batches, and the batch per rank is the same), so the ranks' graphs hold the
// same collectives in the same order; a capture that fails on one rank is agreed on over the
// control plane before anyone replays. The bucket plan is re-made after the first step, during
// warm-up, so the graph holds the final buckets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cuda/graph.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "train/eager_step.h"
#include "train/recovery.h"
#include "train/step_context.h"

namespace dtrain::detail {

// Note [the run's stream]: a CUDA graph cannot be captured on the default stream, and a graph's
// work must be ordered with the eager steps, evaluations and loader copies around it. So when
// graphs are wanted the whole run (eager warm-up steps included) runs on one side stream,
// current from the GraphStep's construction to the end of fit(). The loader's worker threads
// copy batches on streams of their own; Loader::next() makes whatever stream is current wait
// for a batch's copy on the GPU (an event, no host sync) and records the batch's memory on that
// stream for the caching allocator (cuda/streams.h), which is why it must be called on the
// training thread with the run's stream current.
class GraphStep {
 public:
  // Eager steps before the capture: lazy initialisation (cuDNN autotuning, cuBLAS workspaces,
  // optimizer state, the allocator's pools) must happen outside it.
  static constexpr int64_t kWarmupSteps = 3;

  // While it lives and graphs are wanted, a side stream is current (graphs cannot be captured on
  // the default stream): the whole run uses it, eager steps too.
  GraphStep(StepContext& ctx, EagerStep& eager, const MicroBatch& micro, GraphMode mode,
            int64_t rank_batch);

  // Runs the step as a replay, capturing it first once warm-up is over, when this batch can be
  // (a full batch); returns false when the caller must run it eagerly.
  bool run(const Batch& batch, int64_t step, double lr);
  // "eager", or how the graph was used ("CUDA graph: captured at step 3, replayed 17 times").
  std::string story() const;

 private:
  std::string blocker() const;  // why graphs cannot be used ("" = they can)
  bool capture(const Batch& batch, int64_t step, double lr);
  // With several ranks: whether `ok` holds on every rank (a collective: all ranks call it).
  bool all_ranks(bool ok) const;
  void replay(const Batch& batch, double lr);

  StepContext& ctx_;
  EagerStep& eager_;
  const MicroBatch& micro_;
  GraphMode mode_;
  int64_t rank_batch_;
  bool wanted_ = false;
  std::optional<SideStreamGuard> side_stream_;
  std::unique_ptr<StepGraph> graph_;
  Batch static_batch_;  // the graph's inputs
  at::Tensor static_loss_sum_;
  int64_t graph_step_ = -1, replays_ = 0;
  std::string eager_story_ = "eager";
};

}  // namespace dtrain::detail
