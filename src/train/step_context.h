// StepContext: what the step engines (eager, CUDA graph, the micro-batch search and the memory
// ladder, the evaluator) and the loop's pieces beside them (the loss window, telemetry, resume)
// work with: the model and its trainable parameters, the optimizer, the data-parallel protocol
// (the gradient engine and the optimizer shard), the loss scaler, the pixel normalizer, the
// device, the control communicator, the watchdog, this rank's phase times, the fault injector,
// and the few config values a step reads (loss, precision, activation checkpointing, memory
// fraction, clipping). The Trainer builds it once, in its constructor (build_step_context,
// context_build.h); the engines never see the Trainer, the config or the hooks.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/timed_comm.h"
#include "data/pixels.h"
#include "dist/data_parallel.h"
#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/faults.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/records.h"
#include "runtime/watchdog.h"
#include "train/batch_mix.h"
#include "train/weight_average.h"

namespace dtrain::detail {

// Note [control and data planes]: two communicators serve a run. `comm` is the data plane: the
// gradient buckets, the parameter broadcast at the start and, with a sharded optimizer, each
// shard's updated parameters after every step; NCCL on GPUs (asynchronous, on its own stream).
// `control` is the control plane: small CPU values every rank must agree on before acting (the
// replica check, the start-up's decisions of Note [start-up order], the micro-batch search, the
// CUDA-graph capture, the reducer's re-planned bucket order, the out-of-memory flag of each
// step, the hook requests, the loss window, evaluation sums, the checkpoint writer's agreements
// and its gathers), always MPI (the Trainer's contract, dtrain/trainer.h), so an agreement never
// waits behind gradient traffic on the GPU. On CPUs both may be one MPI communicator; its
// collectives run in order on one thread, and every rank issues the same sequence, so they still
// match.
struct StepContext {
  Model* model = nullptr;
  std::vector<at::Tensor> params;        // trainable, in named_parameters() order
  std::vector<std::string> names;        // their names, in the same order
  std::unique_ptr<Optimizer> optimizer;  // made by data_parallel: over this rank's shard if any
  // The gradient engine (several ranks, or dist.reduce_single_rank) and, with
  // dist.shard_optimizer on several ranks, the optimizer shard, behind the step's protocol (Note
  // [data-parallel seam]); set by build_step_context.
  std::unique_ptr<DataParallel> data_parallel;
  std::unique_ptr<GradScaler> scaler;  // fp16, or train.skip_nonfinite (a scale of 1)
  LossKind loss = LossKind::kCrossEntropy;
  double label_smoothing = 0;  // train.label_smoothing
  // RandomErasing, Mixup, CutMix of each rank batch (Note [batch mixing]); null when off. The
  // Trainer draws each step's before the engines run it.
  std::unique_ptr<BatchMix> mix;
  // train.ema_decay: the weight average, updated by the Trainer after optimizer steps, loaded and
  // saved with checkpoints; null when off.
  std::unique_ptr<WeightAverage> ema;
  Precision precision = Precision::kFp32;
  ActivationCheckpointing checkpointing =
      ActivationCheckpointing::kOff;  // train.activation_checkpointing
  double memory_fraction = 0;         // run.gpu_memory_fraction (0: the whole device)
  double clip_grad_norm = 0;          // 0: off
  // model.sync_batch_norm on several ranks: forward and backward run collectives of their own
  // (Note [BatchNorm on N ranks]), so a rank out of memory mid-step cannot finish the step's
  // collectives for its peers as Note [out-of-memory protocol] has it. The communicator the
  // model's BatchNorms exchange over (the data plane's, its seconds counted as communication);
  // null otherwise.
  std::unique_ptr<TimedCommunicator> sync_batch_norm;
  at::Device device = at::kCPU;
  PixelNormalizer pixels;  // uint8 batches to the model's inputs (Note [uint8 pixels])
  int world = 1;
  Communicator* control = nullptr;  // Note [control and data planes]
  Watchdog* watchdog = nullptr;
  PhaseTimes* phases = nullptr;     // this rank's, filled by the engines
  FaultInjector* faults = nullptr;  // tests only
};

// Drops every parameter's gradient (the next backward allocates fresh ones).
void clear_gradients(const StepContext& ctx);

}  // namespace dtrain::detail
