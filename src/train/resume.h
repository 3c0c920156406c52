// Resuming (checkpoint.resume): which checkpoint a run continues from, whether it may, and
// loading it into the step context. Every rank calls resume() (it agrees over the control plane).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "checkpoint/state.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "train/step_context.h"

namespace dtrain::detail {

struct ResumePoint {
  std::string path;  // the checkpoint's folder
  LoopPosition position;
  int saved_world = 0;
  std::map<std::string, std::string> saved_config;  // key -> value, as the checkpoint holds them
  std::map<std::string, std::string> hook_states;   // hook name -> its state (Hook::restore)
};

// auto: the newest complete checkpoint in checkpoint.folder() if there is one; none: a fresh
// start; otherwise a path, a checkpoint or a folder of them (then its newest complete one),
// which must exist. The checkpoint is checked (its marker, every file's size and hash), compared
// with this run (the config keys that decide the model, the data and the sample order; the
// model's parameter names and shapes), and loaded: parameters and buffers, optimizer and
// loss-scaler state (a sharded optimizer: its shard's entries of the whole state, whichever
// number of ranks wrote it, sharded or not), this rank's random generators. Any mismatch is an
// Error naming the file and what differs; keys that may change (train.epochs, train.lr, ...) are
// listed in the log. Returns nullopt for a fresh start; the log says which it is.
std::optional<ResumePoint> resume(StepContext& ctx, const Config& cfg, Communicator& control);

// The position a run resumes at from the checkpoint's state `saved` under `cfg`: the checkpoint's,
// except that an early stop (LoopPosition::stopped_early) ends the run only under the rule that
// made it: when train.early_stop_patience or train.monitor differ from the checkpoint's, the run
// trains on from there, and `said` (when not null) gets the line that says so. More train.epochs
// alone do not: a run planned longer would have stopped at the same step.
LoopPosition resume_position(const SharedState& saved, const Config& cfg, std::string* said);

// The refusal of a finished run at `p`: "this run has finished: its checkpoint is at step N, the
// end of training (train.epochs E), so there is nothing to train ... To train on, raise
// train.epochs or train.max_steps; ...", or for an early stop "... at step N, where it stopped
// early (its reason) ... to train on past the early stop, change its rule:
// train.early_stop_patience ... or train.monitor; ...".
std::string finished_run_error(const LoopPosition& p, const TrainConfig& t);

// Before the data is read (build_session): when the checkpoint checkpoint.resume would continue
// from is at the end of training under `cfg` (its steps per epoch x train.epochs, or
// train.max_steps, and that epoch's end done; or an early stop under the same rule: the loop's
// rule, LoopCursor::finished, whether model.pt is there or not),
// every rank throws the AgreedError the loop would throw, naming the checkpoint. The loop's own
// check stays for a checkpoint this cannot read. A directory another run holds now
// (run_directory_holder) is left to the claim of the directory, which names that run.
void refuse_finished_run(const Config& cfg, Communicator& control);

}  // namespace dtrain::detail
