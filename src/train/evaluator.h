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
// a sequence model) for cross-entropy, like the training loss. Leaves the model in training mode. Collective over ctx.control.
EvalResult evaluate(const StepContext& ctx, const std::shared_ptr<const Dataset>& test,
                    int64_t batch, const LoaderOptions& loader);

}  // namespace dtrain::detail
