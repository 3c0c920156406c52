// One set of BatchNorm statistics on every rank: the running means and variances averaged over
// the ranks wherever something reads them.
//
// Note [BatchNorm on N ranks]: a BatchNorm normalizes with the statistics of the batch it sees
// in training and keeps running estimates (running_mean, running_var) for evaluation. On N ranks
// each rank sees its B/N samples, so two things differ from one rank on B:
//   - the batch statistics: over B/N samples instead of B. model.sync_batch_norm computes them
//     over the global batch (PyTorch's SyncBatchNorm: each rank's count, mean and sum of squared
//     deviations all-gathered and merged in rank order, the two sums of backward all-reduced;
//     models/batch_norm.h, and the fused CUDA op's exchange, cuda/fused_batch_norm.h), so N ranks
//     train as one rank on the same global batch, with the same running statistics on every rank.
//     With micro-batches the statistics are those of each micro-batch over every rank (N x the
//     micro-batch samples), as PyTorch's SyncBatchNorm under gradient accumulation.
//   - without it, the running estimates: each rank's follow its own samples and drift apart
//     (they are equal only at the start, where rank 0's are broadcast). Whatever reads them must
//     see one set: the evaluation (each rank scores the test samples it holds), every save
//     (checkpoint, model.pt, best/), the end. The Trainer averages them over the ranks just
//     before each of these (average_batch_norm_buffers), when training steps have run since the
//     last average. The average, not rank 0's as PyTorch DDP's broadcast_buffers (timm's
//     distribute_bn averages too): a running mean is linear in the batch means it has seen, so the
//     average of the ranks' running means is the running mean of the global batches' means,
//     exactly one rank's on B when the ranks' batches are equal in size; rank 0's would follow
//     1/N of the data. (The running variance averages the ranks' variances, which leaves out the
//     spread between the ranks' means: close to, not equal to, one rank's.) With
//     model.sync_batch_norm the estimates are equal already and nothing is averaged.
// The evaluation that the run reports is therefore the evaluation of the model it saves: the same
// numbers `dtrain eval` gives for model.pt, on any number of ranks.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/models.h"

namespace dtrain::detail {

// Whether `model` has BatchNorm running statistics: buffers whose names end in running_mean or
// running_var (torch::nn's BatchNorm modules and PyTorch's, in a TorchScript module too).
bool has_batch_norm_buffers(Model& model);

// Every rank's BatchNorm running statistics replaced, in place, by their average over the ranks
// of `comm` (Note [BatchNorm on N ranks]): all-gathered and summed in rank order in double, so
// every rank holds the same bits. A collective: every rank calls it at the same point. Nothing
// happens with one rank or without such buffers (the same on every rank).
void average_batch_norm_buffers(Model& model, Communicator& comm);
// The same for tensors under a model's names (a weight average's, train/weight_average.h).
using NamedBuffers = std::vector<std::pair<std::string, at::Tensor>>;
void average_batch_norm_buffers(const NamedBuffers& named, Communicator& comm);

}  // namespace dtrain::detail
