// Making the StepContext (train/context_build.h).
#include "train/context_build.h"

#include "dist/batch_norm_buffers.h"
#include "dist/replicas.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "models/activation_checkpoint.h"
#include "train/start_up_memory.h"

namespace dtrain::detail {

void build_step_context(StepContext& ctx, const Config& cfg, Communicator& comm,
                        Communicator& control, int64_t train_size, int64_t test_size) {
  const TrainConfig& t = cfg.train;
  ctx.loss = t.loss;
  ctx.label_smoothing = t.label_smoothing;
  ctx.precision = t.precision;
  ctx.clip_grad_norm = t.clip_grad_norm;
  ctx.world = comm.world();
  ctx.control = &control;
  if (t.precision == Precision::kFp16) {
    ctx.scaler = std::make_unique<GradScaler>(ctx.device);
  } else if (t.skip_nonfinite) {
    // A scaler that never scales: its check of the gradients decides whether to skip a step.
    ScalerOptions keep_one;
    keep_one.init_scale = 1.0;
    keep_one.growth_factor = 1.0;
    keep_one.backoff_factor = 1.0;
    ctx.scaler = std::make_unique<GradScaler>(ctx.device, keep_one);
  }

  set_activation_checkpointing(*ctx.model, cfg.model.name, t.activation_checkpointing);
  if (cfg.model.sync_batch_norm) {
    // One rank's statistics are the global batch's already: nothing to synchronize, but a model
    // without BatchNorm is refused on every world size alike.
    if (comm.world() > 1) ctx.sync_batch_norm = std::make_unique<TimedCommunicator>(comm);
    if (!ctx.model->set_batch_norm_sync(ctx.sync_batch_norm.get()))
      throw Error("model " + cfg.model.name + " has no BatchNorm to synchronize across ranks" +
                      (cfg.model.name == "cnn" ? " (model.batch_norm=true gives the cnn one)" : ""),
                  "model.sync_batch_norm");
  }
  if (comm.world() > 1 && has_batch_norm_buffers(*ctx.model)) {
    const std::string n = std::to_string(comm.world());
    log::detail(
        ctx.sync_batch_norm
            ? "BatchNorm: mean and variance over the " + n +
                  " ranks' samples of each micro-batch "
                  "(model.sync_batch_norm: per BatchNorm an all-gather in forward, an all-reduce "
                  "in "
                  "backward); the running statistics are the same on every rank"
            : "BatchNorm: each rank's own samples in training; the running statistics averaged "
              "over the " +
                  n +
                  " ranks before each evaluation and save (model.sync_batch_norm=true: "
                  "over every rank's samples, as one rank on the global batch)");
  }
  ctx.checkpointing = t.activation_checkpointing;
  ctx.memory_fraction = cfg.run.gpu_memory_fraction;
  // Out of memory in the start-up's allocations (the model, the buckets, the optimizer state) is
  // agreed before the next collective: one line on every rank (Note [memory ladder]).
  const StateSettings planned = state_settings(cfg, comm.world());
  {
    StartUpMemory memory(ctx, planned);
    memory.run(FaultInjector::StartUp::kModelToDevice, [&] { ctx.model->to(ctx.device); });
    memory.agree();
  }
  for (const auto& p : ctx.model->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    ctx.params.push_back(p.value());
    ctx.names.push_back(p.key());
  }
  if (ctx.params.empty()) throw Error("the model has no trainable parameters", "model.name");

  ctx.watchdog->beat("agreement check");
  verify_replicas(control, cfg.hash(), ctx.names, ctx.params, train_size, test_size);
  ctx.watchdog->beat("parameter broadcast");
  broadcast_parameters(comm, *ctx.model);
  StartUpMemory memory(ctx, planned);
  ctx.data_parallel = std::make_unique<DataParallel>(ctx.params, ctx.names, comm, control);
  DataParallel& dp = *ctx.data_parallel;
  if (shards_optimizer(cfg, comm.world())) {
    // Every rank plans the same shards (the replicas agreed above), so a model that cannot be
    // sharded fails on every rank alike: one line, no MPI_Abort.
    std::string failure;
    try {
      memory.run(FaultInjector::StartUp::kGradientBuckets, [&] { dp.shard_optimizer(); });
    } catch (const Error& e) {
      failure = e.cause();
    }
    agree_no_failure(control, failure, "sharding the optimizer state", "dist.shard_optimizer");
  }
  if (comm.world() > 1 || cfg.dist.reduce_single_rank) {
    ReducerOptions ro;
    ro.bucket_cap_bytes = static_cast<int64_t>(cfg.dist.bucket_cap_mb * 1024 * 1024);
    ro.first_bucket_cap_bytes = static_cast<int64_t>(cfg.dist.first_bucket_mb * 1024 * 1024);
    ro.overlap = cfg.dist.overlap;
    ro.find_unused_parameters = cfg.dist.find_unused_parameters;
    if (cfg.dist.grad_dtype == GradDtype::kBf16) ro.comm_dtype = at::kBFloat16;
    ro.release_buckets = cfg.dist.shard_optimizer == ShardOptimizer::kGradients;
    // Sharded, the buckets are laid out by the shard plan (DataParallel::reduce).
    memory.run(FaultInjector::StartUp::kGradientBuckets, [&] { dp.reduce(ro); });
  }

  OptimizerOptions oo;
  oo.kind = t.optimizer;
  oo.momentum = t.momentum;
  oo.dampening = t.dampening;
  oo.nesterov = t.nesterov;
  oo.weight_decay = t.weight_decay;
  oo.no_decay_norm_bias = t.no_decay_norm_bias;
  oo.beta1 = t.beta1;
  oo.beta2 = t.beta2;
  oo.eps = t.eps;
  oo.fused = t.fused_optimizer;
  if (!shards_optimizer(cfg, comm.world()) && cfg.dist.shard_optimizer != ShardOptimizer::kOff)
    log::warn(
        "dist.shard_optimizer: this run has one rank, so there is nothing to shard: the "
        "optimizer holds the state of every parameter");
  memory.run(FaultInjector::StartUp::kOptimizerState,
             [&] { ctx.optimizer = dp.make_optimizer(oo); });
  memory.agree();
  log::detail("optimizer: " + ctx.optimizer->describe());
  if (dp.sharded()) log::info(dp.describe(*ctx.optimizer));
}

}  // namespace dtrain::detail
