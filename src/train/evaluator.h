// The evaluator: the model on the test split, every sample scored by exactly one rank (rank r
// takes samples r, r + world, ...), results summed over ranks.
#pragma once

#include <cstdint>

#include "dtrain/data/dataset.h"
#include "dtrain/data/loader.h"
#include "dtrain/records.h"
#include "train/step_context.h"

namespace dtrain::detail {

// Loss and accuracy (and top-5 accuracy with more than 5 classes) over `test` in batches of
// `batch` samples per rank. Means are per element for mse and per prediction (sample, or token of
// a sequence model) for cross-entropy, like the training loss. Leaves the model in training mode.
// Collective over ctx.control.
EvalResult evaluate(const StepContext& ctx, const std::shared_ptr<const Dataset>& test,
                    int64_t batch, const LoaderOptions& loader);

// The loop's evaluation, into `rec`: `result` the test split's (count 0 without one), `val`
// data.val_fraction's split's (when `val`). With a weight average (ctx.ema) the average is scored
// too (train/weight_average.h, evaluate_average; the caller has made its BatchNorm statistics one
// set, as the model's), `result` and `val` are then those of the weights `ema_output` names and
// `other` the other weights' test evaluation, and the model is left holding `result`'s weights
// (the caller swaps back after the hooks). Collective.
void evaluate_splits(StepContext& ctx, const std::shared_ptr<const Dataset>& test,
                     const std::shared_ptr<const Dataset>& val, int64_t batch,
                     const LoaderOptions& loader, bool ema_output, EvalRecord& rec);

}  // namespace dtrain::detail
