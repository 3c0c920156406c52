// Hooks: the seams of the training loop. Everything around the core step (progress lines, the
// metrics file, TensorBoard, the profiler window, the end-of-run report, checkpoints, stop
// signals, a user's early stop) is a Hook that the loop calls at fixed points;
// docs/ARCHITECTURE.md lists when each event fires.
// Invariants (tests/dist/test_hooks.cpp):
//   - every rank calls every hook with the same events, in the order the hooks were added
//     (the standard ones first), on the training thread;
//   - a stop or save asked for on any rank takes effect on every rank at the same step
//     boundary (Note [hook requests]); a save reaches on_save() on every rank;
//   - a hook that throws ends training with a dtrain::Error naming the hook, the event and the
//     step; the caller's error policy (run_guarded(), dtrain/session.h) then ends the whole job,
//     so no rank waits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/records.h"

namespace dtrain {

class Communicator;
class Config;
class GradScaler;
class Model;
class Optimizer;

// What a run is, given to every hook before the first step.
struct RunInfo {
  const Config* config = nullptr;  // resolved; lives as long as the Trainer
  int rank = 0, world = 1;
  at::Device device = at::kCPU;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t micro_batch = 0;  // at the start (after `auto` measured it)
  std::string run_dir;      // run.dir/run.name, or "" when the run writes no files
  DataSpec data;            // the training split's
  int64_t train_samples = 0, test_samples = 0;  // test_samples 0: no test split
  int64_t parameters = 0;                       // trainable parameter values
  // A resumed run: the checkpoint it continues from and its step; "" and 0 for a fresh start.
  std::string resumed_from;
  int64_t resumed_step = 0;
  int64_t resumed_samples = 0;  // global samples trained before the checkpoint
  // For throughput and MFU: tokens in one sample (the data's sequence length, data.seq_len, for
  // models that take token ids, else 0),
  // training FLOPs of one sample (forward + backward; Model::train_flops_per_sample(), 0 when
  // unknown), and this device's dense peak FLOP/s at the run's precision (0 when unknown).
  int64_t tokens_per_sample = 0;
  double flops_per_sample = 0;
  double flops_per_sample_llmc = 0;  // the same by llm.c's count (GPT only; else 0)
  double peak_flops = 0;
  std::string device_name;  // "NVIDIA H200", or "cpu"
  // The CPU control plane, for hooks that gather from every rank (a collective: every rank's
  // hook must call it alike); null outside a Trainer.
  Communicator* control = nullptr;
};

// The training state a save writes, given to on_save() on every rank at the same step.
struct TrainState {
  // Where the loop stands (dtrain/records.h): the step, the samples, the micro-batch, the loss
  // window over all ranks, ...; a checkpoint records it as it is.
  LoopPosition position;
  int64_t epoch = 0;  // 1-based epoch of the last step
  Model* model = nullptr;
  // With dist.shard_optimizer on several ranks: this rank's shard, an optimizer over flat pieces
  // of the parameters numbered by the shard plan (the checkpoint writer gathers the whole state
  // from every rank's pieces, Note [sharded optimizer]).
  const Optimizer* optimizer = nullptr;
  // Whether `optimizer` is this rank's shard (dist.shard_optimizer on several ranks): each rank's
  // state() then holds its own pieces' entries only, `world` shards in all.
  bool optimizer_is_shard = false;
  const GradScaler* scaler = nullptr;  // fp16 or train.skip_nonfinite only
  // train.ema_decay: the weight average under the model's names (its own tensors, on the device)
  // and its count of updates since it last copied the model; empty without one.
  std::vector<std::pair<std::string, at::Tensor>> ema;
  int64_t ema_updates = 0;
  const Config* config = nullptr;
  Communicator* control = nullptr;  // the CPU control plane, for savers that must agree
  at::Device device = at::kCPU;     // this rank's
  int rank = 0, world = 1;
  int asked_by = -1;   // the rank whose hook asked for the save (-1: the loop's own schedule)
  std::string reason;  // why: "checkpoint.every_steps", "end of epoch 2", a hook's reason
  // Each hook's state() by its name() ("" left out): what a checkpoint records of the hooks
  // (rank 0's), so that a resumed run's hooks continue where they were (Hook::restore).
  std::map<std::string, std::string> hook_states;
};

// How a hook asks the loop to act. A request is local to the rank that makes it; the loop agrees
// on it with every rank at the next step boundary (Note [hook requests]).
class LoopControl {
 public:
  // Stop training at the agreed step boundary (no further steps or evaluations).
  // `signal`: the stop signal behind the request (0: none), so every rank learns it. Without a
  // signal the stop is the run's end (early stopping): model.pt is written, and so is a final
  // checkpoint that records the end, so the same command run again is refused as a finished
  // run's; with one it is a pause (exit 75, no model.pt, resumed by the same command).
  void request_stop(const std::string& reason, int signal = 0) {
    stop_ = true, stop_reason_ = reason, signal_ = signal;
  }
  // Call on_save() of every hook at the agreed step boundary.
  void request_save(const std::string& reason) { save_ = true, save_reason_ = reason; }
  bool stop_requested() const { return stop_; }
  int stop_signal() const { return signal_; }
  bool save_requested() const { return save_; }
  const std::string& stop_reason() const { return stop_reason_; }
  const std::string& save_reason() const { return save_reason_; }
  // Clears the requests (the loop does it once it has passed them on).
  void clear() { stop_ = save_ = false, signal_ = 0; }

 private:
  bool stop_ = false, save_ = false;
  int signal_ = 0;
  std::string stop_reason_, save_reason_;
};

class Hook {
 public:
  virtual ~Hook() = default;
  // Names the hook in errors and logs.
  virtual std::string name() const = 0;

  // Before the first step, after the micro-batch is known.
  virtual void on_start(const RunInfo& run, LoopControl& control) {}
  // Right after on_start() (and restore()), on every rank: the state that on_save() will be
  // given, its tensors with the shapes, dtypes and devices they keep (the position is the
  // start's). For hooks that prepare what a save needs once, before training rather than in the
  // first save's step: the checkpoint writer allocates its host buffers here.
  virtual void prepare_save(const TrainState& state) {}
  // Before each step; `step` counts the steps done so far (0 before the first).
  virtual void on_step_begin(int64_t step) {}
  // After each optimizer step.
  virtual void on_step(const StepRecord& record, LoopControl& control) {}
  // After each evaluation.
  virtual void on_eval(const EvalRecord& record, LoopControl& control) {}
  // A save is due (the schedule of checkpoint.every_steps / every_epoch and, with either, the
  // end of training; or a request every rank agreed on). Returns whether this hook wrote the
  // state somewhere; when a request was made and no hook writes, the loop says so.
  virtual bool on_save(const TrainState& state) { return false; }
  // What of this hook a checkpoint carries, as text (Lightning's Callback.state_dict): before
  // each save the loop asks every hook, and rank 0's answer is written with the checkpoint,
  // keyed by name(). "" (the default): nothing.
  virtual std::string state() const { return ""; }
  // A resumed run, right after on_start(): what state() gave when the checkpoint was written
  // (every rank gets rank 0's), or "" when the checkpoint holds none for this hook (it had no
  // state then, or the checkpoint was written before checkpoints carried hooks' states).
  virtual void restore(const std::string& state) {}
  // After training (also after a stop). Hooks run in order and may add to the summary (the
  // profiler window adds its report); later hooks see what earlier ones added.
  virtual void on_end(TrainSummary& summary) {}
};

}  // namespace dtrain
