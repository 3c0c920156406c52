// Trainer: the data-parallel training loop of one rank.
// Invariants: every rank starts from rank 0's parameters; every optimizer step sees gradients
// averaged over the same global batch whatever the world size and micro-batch (N ranks x B/N ==
// 1 rank x B); evaluation counts every test sample exactly once across ranks.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"

namespace dtrain {

struct EvalResult {
  double loss = 0.0;      // mean over the test set (per token for sequence models)
  double accuracy = 0.0;  // classification only: fraction of predictions (samples or tokens) right
  int64_t count = 0;      // samples evaluated over all ranks
};

// Seconds this rank spent in each phase (host clock: on CUDA, time to enqueue work plus any
// waits; queued GPU work shows up where the host next waits for it).
struct PhaseTimes {
  double data = 0;      // waiting for the loader
  double compute = 0;   // forward + backward (all-reduce hidden behind backward included)
  double comm = 0;      // waiting for gradient all-reduces after backward, and agreeing
  double optimizer = 0; // clip + step
  double eval = 0;
  double total() const { return data + compute + comm + optimizer; }
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t samples = 0;  // global samples trained on
  double seconds = 0;   // training time, evaluation excluded
  double last_loss = 0; // mean training loss of the last logged window, over all ranks
  EvalResult eval;      // last evaluation (count 0 if none)
  PhaseTimes phases;    // this rank
  int64_t oom_retries = 0;    // steps redone with a smaller micro-batch after out-of-memory
  int64_t skipped_steps = 0;  // fp16 steps skipped for non-finite gradients
  int64_t micro_batch = 0;    // micro-batch in use at the end
  std::string step_mode;      // how steps ran: "eager", or the CUDA graph's story
  std::string profile;        // the profiler's summary (empty when not profiling)
};

class Trainer {
 public:
  // `comm` carries gradients and parameters (NCCL or MPI); `control` (MPI, CPU tensors) carries
  // metrics and agreement checks; they may be the same object on CPU.
  Trainer(Config cfg, Communicator& comm, Communicator& control, at::Device device,
          std::shared_ptr<Model> model, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test);
  ~Trainer();

  // Train for train.epochs (or until train.max_steps), evaluating after each epoch if asked.
  TrainSummary fit();
  // Evaluate on the test split (every sample once over all ranks).
  EvalResult evaluate();

  Model& model() { return *model_; }
  const Config& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // The gradient engine (null when there is nothing to average).
  const class Reducer* reducer() const;
  // Where rank 0 writes config.yaml and metrics.jsonl ("" when not writing).
  std::string run_dir() const { return run_dir_; }

 private:
  void check_agreement();
  void broadcast_parameters();
  // One optimizer step on this rank's share of the global batch.
  void train_step(const Batch& batch);
  // After forward/backward: loss-scale check, clipping, the optimizer step at `lr`, and the
  // step's loss added to the window (all on the device; capturable without loss scaling).
  void apply_update(const at::Tensor& loss_sum, double lr);
  bool forward_backward(const Batch& batch, int64_t micro, at::Tensor& loss_sum);
  // CUDA graph of the whole step: why it cannot be used ("" = it can), capture, replay.
  std::string graph_blocker() const;
  bool capture_step(const Batch& batch);
  void replay_step(const Batch& batch);
  void find_micro_batch();
  double take_window_loss();
  void finish_profile(bool at_end);
  struct LoaderOptions loader_options() const;
  double lr_at(int64_t step) const;
  at::Tensor loss_fn(const at::Tensor& out, const at::Tensor& targets, bool sum) const;
  void write_metrics(const nlohmann::json& record);

  Config cfg_;
  Communicator& comm_;
  Communicator& control_;
  at::Device device_;
  std::shared_ptr<Model> model_;
  std::shared_ptr<const Dataset> train_, test_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> param_names_;
  int64_t step_ = 0;
  int64_t total_steps_ = 0;
  std::string run_dir_;
  PhaseTimes phases_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain
