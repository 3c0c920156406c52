// Out of memory before the first step (Note [memory ladder]): the start-up's large allocations,
// each run on this rank alone and then agreed over the ranks, so that a rank that runs out of
// memory leaves none waiting in a collective and every rank ends with the same line: what ran
// out, what the training state needs on each rank against what the device allows, and the
// settings that free it (state_does_not_fit).
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/faults.h"
#include "train/memory_ladder.h"
#include "train/out_of_memory.h"
#include "train/step_context.h"

namespace dtrain::detail {

// The settings the state's size depends on, as in effect for `world` ranks (planned_memory).
StateSettings state_settings(const Config& cfg, int world);

// Out of memory in the start-up, on some rank: every rank throws it alike, after agreeing
// (StartUpMemory::agree), so none is left in a collective. `dtrain bench` records the setting as
// "does not fit" (Note [does not fit]).
class StateDoesNotFit : public AgreedError {
 public:
  using AgreedError::AgreedError;
};

class StartUpMemory {
 public:
  // `planned`: the config's settings, while the state is being allocated (the Trainer's
  // constructor): what it needs is planned_memory's; none: what it holds, measured
  // (memory_kinds), once it is allocated (fit()).
  explicit StartUpMemory(const StepContext& ctx,
                         std::optional<StateSettings> planned = std::nullopt);
  // Runs `body`, which makes no collective, unless an allocation before it ran out of memory on
  // this rank. The fault injector (ctx.faults) is asked first. An out-of-memory error is kept
  // (ran_out()); any other is thrown.
  void run(FaultInjector::StartUp stage, const std::function<void()>& body);
  // Records that `what` ran out of memory on this rank ("in the first forward and backward (...)").
  void ran_out(const std::string& what);
  // This rank's line: "out of memory <what>: the training state needs ..."; empty: none ran out.
  const std::string& failure() const { return failure_; }
  // Every rank, at the same point (a collective over ctx.control): when some rank ran out of
  // memory, every rank throws the same StateDoesNotFit, "start-up failed on rank R: <its line>".
  void agree() const;

 private:
  const StepContext& ctx_;
  std::optional<StateSettings> planned_;
  std::string failure_;
};

}  // namespace dtrain::detail
