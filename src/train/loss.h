// The training and evaluation losses. Classification models give (N, C) logits, sequence models
// (N, T, V) for (N, T) targets (every position is a sample); regression (N, D) outputs.
#pragma once

#include <ATen/ATen.h>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"

namespace dtrain::detail {

// Mean (or, with `sum`, summed) loss in fp32. Cross-entropy over large vocabularies on CUDA
// reads the logits in their own precision (cuda/fused_loss.h); elsewhere the logits are cast to
// fp32 first. Cross-entropy on non-class targets is an Error naming train.loss. With
// `reuse_outputs` (Model::loss_can_reuse_outputs) the fused cross-entropy's backward writes the
// logits' gradient over the logits.
at::Tensor compute_loss(LossKind kind, const at::Tensor& out, const at::Tensor& targets, bool sum,
                        bool reuse_outputs = false);

// Before training: cross_entropy needs class ids (spec.num_classes > 0), mse regression targets
// (spec.target_dim > 0); anything else is an Error naming train.loss and the data (`data`, the
// dataset's description).
void check_loss_fits(LossKind kind, const DataSpec& spec, const std::string& data);

}  // namespace dtrain::detail
