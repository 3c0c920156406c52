// What the training loop reports to hooks and callers: plain values. Unless a field says "this
// rank", it is the same on every rank (losses and evaluation results are reduced over ranks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain {

// Seconds this rank spent in each phase (host clock: on CUDA, time to enqueue work plus any
// waits; queued GPU work shows up where the host next waits for it).
struct PhaseTimes {
  double data = 0;       // waiting for the loader
  double compute = 0;    // forward + backward (all-reduce hidden behind backward included)
  double comm = 0;       // waiting for gradient all-reduces after backward, and agreeing
  double optimizer = 0;  // clip + step
  double eval = 0;
  double total() const { return data + compute + comm + optimizer; }
};

struct EvalResult {
  double loss = 0.0;      // mean over the test set (per token for sequence models)
  double accuracy = 0.0;  // classification only: fraction of predictions (samples or tokens) right
  // Classification with more than 5 classes: the fraction of predictions whose class is among
  // the model's 5 highest scores.
  std::optional<double> top5;
  int64_t count = 0;  // samples evaluated over all ranks
};

// One gradient bucket of the last synchronized step: when it was ready, when its all-reduce
// was handed to the communicator, and when the wait for that all-reduce returned after backward,
// in seconds since that step's synchronized backward began (host clock, this rank). With MPI
// the host blocks in that wait; with NCCL it does not (the training stream is made to wait), so
// `done` then marks when the step could go on enqueueing work.
struct BucketTiming {
  int bucket = 0;
  int64_t bytes = 0;
  double ready = 0;
  double launched = 0;
  double done = 0;
};

// One GPU's figures from NVML (telemetry/gpu_monitor.h), sampled in the background while
// training: means over the window since the previous reading (memory and clocks: the last sample).
struct GpuStats {
  int index = -1;           // NVML device index
  int samples = 0;          // samples behind the means
  double utilization = 0;   // percent of the time a kernel ran
  double memory_used = 0;   // bytes in use on the device (every process)
  double memory_total = 0;  // bytes
  double power_w = 0;
  double sm_clock_mhz = 0, memory_clock_mhz = 0;
  bool steady = false;  // a run's means: they leave out the start-up (GpuSampleSums)
};

// The caching allocator's figures on this rank's GPU, in bytes (zero on a CPU rank).
struct DeviceMemory {
  int64_t allocated = 0;  // held by tensors now
  int64_t reserved = 0;   // held by the caching allocator
  int64_t peak = 0;       // peak of allocated since training began
  // held by the GPU JPEG decoders (data.decode gpu, beside the caching allocator): device memory
  // and page-locked host memory
  int64_t decode = 0, decode_pinned = 0;
  // page-locked host memory holding a checkpoint's state for background saves (checkpoint.async,
  // rank 0's, allocated at the first save): in the summary only
  int64_t checkpoint_pinned = 0;
};

// After every optimizer step.
struct StepRecord {
  int64_t step = 0;   // optimizer steps done, this one included (1 after the first)
  int64_t epoch = 0;  // 1-based epoch of this step
  // The epochs the run reaches: train.epochs, fewer when train.max_steps ends it sooner (its
  // last one then partial: total_steps says where it ends).
  int64_t epochs = 0;
  int64_t total_steps = 0;  // steps the run will make unless stopped
  int64_t samples = 0;      // global samples trained on so far
  double lr = 0;            // learning rate of this step
  int64_t micro_batch = 0;  // samples per forward/backward in this step
  // Mean training loss over all ranks since the previous read. The loop reads it (a collective)
  // every run.log_every steps and at the last step of each epoch and of the run; on other steps
  // it is empty.
  std::optional<double> loss;
  double samples_per_s = 0;  // global samples per second over the same window (when loss is set)
  PhaseTimes phases;         // this rank, since training started
  double wall_time = 0;      // Unix time (seconds) of this record
  double elapsed = 0;        // seconds since this run's first step began (this rank)
  // The rest is set when `loss` is, for the same window (the steps since the previous read).
  int64_t window_steps = 0;
  PhaseTimes window_phases;          // this rank
  std::optional<double> loss_scale;  // fp16 (and train.skip_nonfinite): the scaler's scale now
  std::optional<double> grad_norm;   // global 2-norm of the averaged gradients of this step
  DeviceMemory memory;               // this rank's GPU
  std::optional<GpuStats> gpu;       // this rank's GPU, NVML means over the window
  // This rank's buckets of this step (gradient engine only; valid during on_step, else null;
  // empty once the step runs as a CUDA graph, whose replays have no host side to time),
  // and when that step's synchronized backward began, their times' origin: seconds on this
  // rank's std::chrono::steady_clock (its time_since_epoch), to line them up with a hook's own
  // readings of that clock.
  const std::vector<BucketTiming>* buckets = nullptr;
  double buckets_start = 0;
  double backward_end = 0;  // when that step's backward ended, on the buckets' clock
};

// After every evaluation: at the end of an epoch when train.eval is on, and every
// train.eval_every_steps steps inside epochs.
struct EvalRecord {
  int64_t step = 0;
  int64_t epoch = 0;   // 1-based
  int64_t epochs = 0;  // as StepRecord's
  // An evaluation inside an epoch (train.eval_every_steps, or the end of train.max_steps) is at a
  // step that is not a multiple of steps_per_epoch.
  int64_t steps_per_epoch = 0, total_steps = 0;
  double train_loss = 0;     // mean training loss of the last window read (just before)
  double epoch_seconds = 0;  // the epoch so far, its evaluations included
  EvalResult result;
  // train.ema_decay: `result` scores the weights train.ema_output names (the weight average's by
  // default, `weights` "ema"; else the model's, "model"), the ones model.pt, best/ and
  // train.monitor take, and `other` the other weights.
  std::optional<EvalResult> other;
  std::string weights = "model";
  // data.val_fraction: `result`'s weights on the validation split held out of the training set
  // (train.monitor's val_* metrics read it).
  std::optional<EvalResult> val;
};

// Where the training loop stands after `step` optimizer steps: what a save hands its hooks
// (TrainState::position) and what a checkpoint records (checkpoint/state.h), from which a
// resumed run goes on as the uninterrupted one would.
struct LoopPosition {
  int64_t step = 0;  // optimizer steps done
  int64_t steps_per_epoch = 0;
  bool epoch_end_done = false;  // at an epoch's end: its loss read and evaluation have run
  int64_t samples = 0;          // global samples trained on, a resumed run's earlier ones included
  int64_t micro_batch = 0;      // in use now
  // The loss window since the last read: its sum over all ranks and its steps, so that a
  // resumed run's next read gives the uninterrupted run's mean.
  double window_loss = 0;
  int64_t window_steps = 0;
  double last_loss = 0;  // mean training loss of the last window read
  // The step the learning-rate schedule counts from (train.resume_schedule).
  int64_t schedule_start = 0;
  // The run ended at this step: a hook asked to stop without a stop signal (early stopping), so
  // it has finished here whatever its planned steps (LoopCursor::finished); `stop_reason` is what
  // the hook said on rank 0 ("" when another rank's hook asked). A stop signal's stop is a pause,
  // not an end: false.
  bool stopped_early = false;
  std::string stop_reason;
};

// At the end of training.
struct TrainSummary {
  int64_t steps = 0;
  int64_t total_steps = 0;  // the steps the run was planned to end at
  int64_t samples = 0;      // global samples trained on, a resumed run's earlier ones included
  double seconds = 0;       // this process's training time, evaluation excluded
  int64_t run_samples = 0;  // global samples this process trained (run_samples / seconds: the
                            // overall rate, start-up and CUDA-graph capture included)
  // The steady rate: global samples per second of training over this process's steps after
  // the first loss read past its warm-up (the eager steps before a CUDA graph, the capture and
  // one more step), from step `steady_from_step` (1-based, as the progress lines count) to the
  // end; 0 and -1 when the run ended before that.
  double steady_samples_per_s = 0;
  int64_t steady_from_step = -1;
  double last_loss = 0;       // mean training loss of the last logged window, over all ranks
  EvalResult eval;            // last evaluation (count 0 if none)
  int64_t eval_step = -1;     // the step `eval` is of (-1: none in this process)
  PhaseTimes phases;          // this rank
  int64_t oom_retries = 0;    // steps redone with a smaller micro-batch after out-of-memory
  int64_t skipped_steps = 0;  // steps skipped for non-finite gradients (fp16, train.skip_nonfinite)
  int64_t micro_batch = 0;    // micro-batch in use at the end
  // How steps ran: "eager", "eager (CUDA graph capture failed: ...)", or "CUDA graph: captured
  // at step S, replayed N times".
  std::string step_mode;
  bool stopped = false;  // a hook asked to stop before the planned end (signals: a hook too)
  int stopped_by = -1;   // the rank whose hook asked (-1: none)
  int stop_signal = 0;   // the signal (SIGTERM, SIGUSR1, SIGINT) that asked, on any rank
  // Why the hook asked, as this rank's hook said it ("" when this rank asked nothing, and for a
  // signal). A stop without a signal is the run's end (an early stop); with one, a pause.
  std::string stop_reason;
  std::string checkpoint;        // the last complete checkpoint written or resumed from ("" none)
  int64_t checkpoint_step = -1;  // its step
  // What <run dir>/model.pt holds after the run, on rank 0 (the model_file hook sets them at
  // on_end): its path ("" when there is none) and its step (-1: not known, a model.pt without
  // model.json). A run stopped by a signal writes none, so a model.pt there is an earlier end's.
  std::string model_file;
  int64_t model_step = -1;
  // The gradient engine's last synchronized step (empty when there is none, with one rank and no
  // dist.reduce_single_rank, or when the steps ran as a CUDA graph).
  std::vector<BucketTiming> buckets;
  double backward_end = 0;  // when that step's backward ended (same clock as the buckets)
  // Filled by hooks at the end, in hook order (the profiler window's report).
  std::string profile;
  double wall_start = 0, wall_end = 0;  // Unix time of the first step's start and of the end
  DeviceMemory memory;                  // this rank's GPU at the end (peak over the run)
  // Bytes of optimizer state this rank holds (moments, momentum buffers, step counts): all of it,
  // or its shard's with dist.shard_optimizer; `optimizer_shards` ranks share the state (1: not
  // sharded).
  int64_t optimizer_state_bytes = 0;
  int optimizer_shards = 1;
  // Bytes of this rank's trainable parameters and of their gradients (the same number of values).
  int64_t weight_bytes = 0, gradient_bytes = 0;
  // Bytes this rank sends each optimizer step through the collectives of the gradient engine and
  // of a sharded optimizer, as NCCL's ring algorithms move them (0 with one rank): the all-reduce
  // of the gradient buckets 2(N-1)/N of their bytes, their reduce-scatter (dist.shard_optimizer)
  // (N-1)/N, the sharded optimizer's broadcasts of the updated parameters (N-1)/N of the
  // parameters' bytes, averaged over the ranks.
  int64_t wire_all_reduce_bytes = 0, wire_reduce_scatter_bytes = 0, wire_broadcast_bytes = 0;
  std::optional<GpuStats> gpu;  // this rank's GPU, NVML means over the whole run
  // Every rank's phase times (eval included), index = rank (gathered at the end).
  std::vector<PhaseTimes> rank_phases;
};

}  // namespace dtrain
