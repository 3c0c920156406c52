// The training and evaluation losses. Classification models give (N, C) logits, sequence models
// (N, T, V) for (N, T) targets (every position is a sample); regression (N, D) outputs.
#pragma once

#include <ATen/ATen.h>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"

namespace dtrain {
class Model;
class Communicator;
}  // namespace dtrain

namespace dtrain::detail {

struct StepContext;

// Mean (or, with `sum`, summed) loss in fp32. Cross-entropy over large vocabularies on CUDA
// reads the logits in their own precision (cuda/fused_loss.h); elsewhere the logits are cast to
// fp32 first. Cross-entropy takes class ids, or soft targets: float class probabilities of the
// logits' shape (mixup and cutmix's, train/batch_mix.h), as PyTorch's cross_entropy does; any
// other targets are an Error naming train.loss. `label_smoothing` e: PyTorch's
// cross_entropy(label_smoothing=e), the targets' probabilities times 1 - e plus e / classes. With
// `reuse_outputs` (Model::loss_can_reuse_outputs) the fused cross-entropy's backward writes the
// logits' gradient over the logits.
at::Tensor compute_loss(LossKind kind, const at::Tensor& out, const at::Tensor& targets, bool sum,
                        bool reuse_outputs = false, double label_smoothing = 0.0);

// The mean loss of one training micro-batch: the model's own cross-entropy where it has one
// (Model::forward_cross_entropy, class ids only), else forward and compute_loss (with the
// logits' gradient over the logits where Model::loss_can_reuse_outputs).
at::Tensor training_loss(LossKind kind, Model& model, const at::Tensor& inputs,
                         const at::Tensor& targets, double label_smoothing = 0.0);

// Before training: cross_entropy needs class ids (spec.num_classes > 0), mse regression targets
// (spec.target_dim > 0); anything else is an Error naming train.loss and the data (`data`, the
// dataset's description).
void check_loss_fits(LossKind kind, const DataSpec& spec, const std::string& data);

// Once the model is built (the Trainer runs it on one training sample in evaluation mode): its
// output `out` for `targets` must fit them. Class ids (N,) or (N, T) need outputs (N, W) or
// (N, T, W) with W >= spec.num_classes, since the readers check every label against
// spec.num_classes (data/labels.h), never against W, and a class id the model has no output for
// gives a NaN loss on the GPU; regression targets (N, D) need outputs (N, D), as mse would
// broadcast any other width. Anything else is an Error naming model.name, the model (`model`)
// and the data (`data`).
void check_outputs_fit(const DataSpec& spec, const at::Tensor& out, const at::Tensor& targets,
                       const std::string& model, const std::string& data);

// The Trainer's checks before training, on every rank (collectives over `control`):
// check_loss_fits, then the model's (ctx.model's) outputs on the first training sample in
// evaluation mode (no dropout drawn, no batch-norm statistics moved) through check_outputs_fit.
// Reading that sample, the checks and running out of memory in the forward are each agreed
// (Note [data errors]): one AgreedError on every rank.
void check_data_fits(StepContext& ctx, LossKind kind, const Dataset& train, Communicator& control);

}  // namespace dtrain::detail
