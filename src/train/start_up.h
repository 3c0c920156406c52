// The start of a fit() call: what every rank settles before the loop's objects are made.
//
// Note [start-up order]: before its first step, fit() makes these collectives, on every rank in
// this order (a rank that made them in another order would wait in one the others never enter,
// or match the wrong one): the run directory's lock (rank 0 takes it, every rank learns whether
// it could), the resume decision and its loading (resume()), the check that a fresh start
// overwrites no earlier run's files, the micro-batch (train.micro_batch: auto measures it, every
// rank taking the smallest that fits everywhere), whether the step plan failed anywhere (Note
// [data errors]); then, in the loop's constructor
// (train/trainer.cpp), the engines (GraphStep: every rank runs the step as a CUDA graph or none
// does) and the hooks' on_start (a hook may gather). Each is a statement, in start_up() and in
// that constructor's body, never a member's initializer, whose place would be the member's
// declaration. Before them, the Trainer's constructor agrees, on every rank alike, whether the
// model's move to the device, then the buckets and optimizer state (build_step_context), then
// (check_data_fits) whether the loss and the first training sample fit the data, the one-sample
// output check ran out of memory, and its outputs fit, anywhere; and the first optimizer step of a
// fit() agrees once more, after the optimizer's own step and before a sharded optimizer's
// gather (Note [memory ladder]).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "train/plan.h"
#include "train/resume.h"
#include "train/run_directory.h"
#include "train/step_context.h"

namespace dtrain::detail {

struct StartUp {
  std::unique_ptr<RunDirectory> run_dir;  // its lock is held while this lives
  std::optional<ResumePoint> from;        // a resumed run's checkpoint; nullopt: a fresh start
  // The micro-batch to start with: the checkpoint's on the same world, else the config's, or
  // measured (train.micro_batch: auto).
  int64_t micro_batch = 0;
  // From the checkpoint's step; an Error naming the checkpoint when its epochs had another
  // number of steps.
  StepPlan plan;
};

// The collectives of Note [start-up order] up to the micro-batch, then the step plan. Every rank
// calls it (on `control`; `ctx` is loaded with the checkpoint's state when the run resumes).
StartUp start_up(StepContext& ctx, const Config& cfg, Communicator& control, const Dataset& train);

}  // namespace dtrain::detail
