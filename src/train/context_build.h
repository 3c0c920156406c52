// Making the StepContext, once, in the Trainer's constructor: the start-up's allocations under
// the out-of-memory guards of start_up_memory.h, which itself works on a StepContext; so the
// making sits above both, and step_context.h below them stays what the engines get.
#pragma once

#include <cstdint>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "train/step_context.h"

namespace dtrain::detail {

// Fills `ctx`, whose model, device and watchdog the caller has set (the Trainer sets `phases`
// too, and `pixels` and `faults` after): the config values a step reads, the world and
// `control`; the loss scaler (fp16, or train.skip_nonfinite). Sets the model's activation
// checkpointing (train.activation_checkpointing: an Error naming the key when the model has no
// blocks for it), moves the model to ctx.device, collects the trainable parameters (none is an
// Error naming model.name), checks that every rank holds the same config, model and datasets,
// broadcasts rank 0's parameters and buffers, and builds the gradient engine (with several
// ranks, or dist.reduce_single_rank) and the optimizer (over this rank's shard with
// dist.shard_optimizer on several ranks, a model that cannot be sharded being one agreed Error;
// with one rank and the key set, a warning naming it, and one optimizer over every parameter).
// Running out of memory moving the model, or making the buckets or the optimizer state, is agreed
// after each (StartUpMemory; ctx.faults is asked first): every rank throws the same
// StateDoesNotFit. Every rank calls it: it agrees over `control` and broadcasts over `comm`.
void build_step_context(StepContext& ctx, const Config& cfg, Communicator& comm,
                        Communicator& control, int64_t train_size, int64_t test_size);

}  // namespace dtrain::detail
