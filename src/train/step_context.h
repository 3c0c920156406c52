// StepContext: what the step engines (eager, CUDA graph, recovery, evaluator) work with, and no
// more: the model and its trainable parameters, the optimizer, the gradient engine, the loss
// scaler, the loss and the device. The Trainer builds it once; the engines never see the
// Trainer, the config file or the hooks.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/faults.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/records.h"
#include "data/pixels.h"
#include "dist/reducer.h"
#include "runtime/watchdog.h"

namespace dtrain::detail {

// Note [control and data planes]: two communicators serve a run. `comm` is the data plane: the
// gradient buckets and the parameter broadcast, NCCL on GPUs (asynchronous, on its own stream).
// `control` is the control plane: small CPU values every rank must agree on before acting (the
// replica check, the reducer's re-planned bucket order, the out-of-memory flag of each step, the
// hook requests, the loss window, evaluation sums), always MPI, so an agreement never waits
// behind gradient traffic on the GPU. On CPUs both may be one MPI communicator; its collectives
// run in order on one thread, and every rank issues the same sequence, so they still match.
struct StepContext {
  Model* model = nullptr;
  std::vector<at::Tensor> params;  // trainable, in named_parameters() order
  std::vector<std::string> names;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Reducer> reducer;   // null with one rank, unless dist.reduce_single_rank
  std::unique_ptr<GradScaler> scaler;  // fp16, or train.skip_nonfinite (a scale of 1)
  LossKind loss = LossKind::kCrossEntropy;
  Precision precision = Precision::kFp32;
  double clip_grad_norm = 0;  // 0: off
  at::Device device = at::kCPU;
  PixelNormalizer pixels;  // uint8 batches to the model's inputs (Note [uint8 pixels])
  int world = 1;
  Communicator* control = nullptr;  // Note [control and data planes]
  Watchdog* watchdog = nullptr;
  PhaseTimes* phases = nullptr;     // this rank's, filled by the engines
  FaultInjector* faults = nullptr;  // tests only
};

// Sets the model's activation checkpointing (train.activation_checkpointing: an Error naming
// the key when the model has no blocks for it), moves the model to ctx.device, collects the trainable parameters, checks that every rank holds
// the same config, model and datasets, broadcasts rank 0's parameters and buffers, and builds the
// optimizer, the gradient engine (with several ranks, or dist.reduce_single_rank) and the loss
// scaler (fp16, or train.skip_nonfinite).
void build_step_context(StepContext& ctx, const Config& cfg, Communicator& comm,
                        Communicator& control, int64_t train_size, int64_t test_size);

// Drops every parameter's gradient (the next backward allocates fresh ones).
void clear_gradients(const StepContext& ctx);

}  // namespace dtrain::detail
