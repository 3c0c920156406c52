#include "train/telemetry.h"

#include "optim/clip.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>

#include "cuda/device.h"
#include "cuda/jpeg_batch.h"
#include "cuda/memory.h"
#include "dtrain/amp.h"
#include "train/memory_ladder.h"

namespace dtrain::detail {
namespace {

PhaseTimes minus(const PhaseTimes& a, const PhaseTimes& b) {
  PhaseTimes d;
  d.data = a.data - b.data;
  d.compute = a.compute - b.compute;
  d.comm = a.comm - b.comm;
  d.optimizer = a.optimizer - b.optimizer;
  d.eval = a.eval - b.eval;
  return d;
}

// Dense (no sparsity) peak FLOP/s of the GPUs whose figures are published: tensor cores for
// bf16/fp16, plain fp32 otherwise. Unknown devices give 0 (no MFU).
double dense_peak_flops(const std::string& name, Precision precision) {
  struct Peak {
    const char* name;
    double half, fp32;
  };
  static const Peak peaks[] = {
      {"H200", 989.4e12, 66.9e12}, {"H100 PCIe", 756.5e12, 51.2e12}, {"H100", 989.4e12, 66.9e12},
      {"A100", 312e12, 19.5e12},   {"L40S", 362.05e12, 91.6e12},     {"A10", 125e12, 31.2e12},
      {"V100", 125e12, 15.7e12},
  };
  for (const Peak& p : peaks)
    if (name.find(p.name) != std::string::npos)
      return precision == Precision::kFp32 ? p.fp32 : p.half;
  return 0;
}

}  // namespace

void describe_throughput(RunInfo& info, const Model& model, const Config& cfg) {
  // Sequence models take token ids (int64, one row of model.seq_len per sample).
  const DataSpec& d = info.data;
  info.tokens_per_sample =
      d.input_dtype == at::kLong && d.input_shape.size() == 1 ? d.input_shape[0] : 0;
  info.flops_per_sample = model.train_flops_per_sample();
  info.flops_per_sample_llmc = model.train_flops_per_sample_llmc();
  if (info.device.is_cuda()) {
    info.device_name = device_name(info.device.index());
    info.peak_flops = dense_peak_flops(info.device_name, cfg.train.precision);
  } else {
    info.device_name = "cpu";
  }
}

StepTelemetry::StepTelemetry(const StepContext& ctx, const Config& cfg)
    : ctx_(ctx),
      rate_start_(Clock::now()),
      epoch_start_(rate_start_),
      start_(rate_start_),
      wall_start_(unix_now()),
      window_start_(*ctx.phases) {
  if (ctx.device.is_cuda()) {
    reset_peak_memory(ctx.device);
    gpu_ = std::make_unique<GpuMonitor>(pci_bus_id(ctx.device.index()), cfg.run.gpu_sample_s);
  }
}

void StepTelemetry::fill_step(StepRecord& rec) const {
  rec.wall_time = unix_now();
  rec.elapsed = seconds_since(start_);
  const DataParallel& dp = *ctx_.data_parallel;
  if (dp.reduces()) {
    rec.buckets = &dp.last_timeline();
    rec.buckets_start = std::chrono::duration<double>(dp.last_start().time_since_epoch()).count();
    rec.backward_end = dp.last_backward_end();
  }
}

void StepTelemetry::step_done(int64_t samples) {
  ++rate_steps_, ++steps_;
  rate_samples_ += samples, samples_ += samples;
}

void StepTelemetry::epoch_begins() {
  epoch_start_ = training_since_ = Clock::now();
  in_epoch_ = true;
}

void StepTelemetry::epoch_ends() {
  if (in_epoch_) train_seconds_ += seconds_since(training_since_);
  in_epoch_ = false;
}

void StepTelemetry::go_on() {
  training_since_ = Clock::now();
  in_epoch_ = true;
  restart_rate();
}

void StepTelemetry::restart_rate() {
  rate_steps_ = 0, rate_samples_ = 0;
  rate_start_ = Clock::now();
}

void StepTelemetry::fill_window(StepRecord& rec) {
  rec.samples_per_s = static_cast<double>(rate_samples_) / seconds_since(rate_start_);
  rec.window_steps = rate_steps_;
  // A loss read has waited for the GPU: a point where the host's clock and the GPU's work agree.
  if (steady_.step < 0 && steps_ >= kSteadyAfterSteps)
    steady_ = {rec.step + 1, steps_, samples_,
               train_seconds_ + (in_epoch_ ? seconds_since(training_since_) : 0.0)};
  rec.window_phases = minus(rec.phases, window_start_);
  window_start_ = rec.phases;
  if (ctx_.scaler) rec.loss_scale = ctx_.scaler->current_scale();
  const DataParallel& dp = *ctx_.data_parallel;
  if (dp.sharded()) {
    // Each rank holds its shard of the gradients: the norm over every rank's (a collective;
    // every rank reads the loss, and so gets here, at the same steps).
    rec.grad_norm = gradient_norm(dp.update_parameters(), dp.agreed_over()).item<double>();
  } else {
    std::vector<at::Tensor> grads;
    for (const auto& p : ctx_.params)
      if (p.grad().defined()) grads.push_back(p.grad());
    if (!grads.empty()) {
      // One device reduction and one read: the norms of every gradient, then theirs.
      const at::Tensor norms = at::stack(at::_foreach_norm(grads, 2.0)).to(at::kFloat);
      rec.grad_norm = norms.norm().item<double>();
    }
  }
  if (ctx_.device.is_cuda()) {
    const MemoryStats m = memory_stats(ctx_.device);
    const DecodeMemory d = decode_memory();
    rec.memory = {m.allocated, m.reserved, m.peak, d.device, d.pinned};
  }
  if (gpu_) {
    rec.gpu = gpu_->take_window();
    // The run's GPU means start after the first window, which holds the start-up.
    if (!gpu_steady_) gpu_->start_steady();
    gpu_steady_ = true;
  }
  restart_rate();
}

void StepTelemetry::fill_summary(TrainSummary& summary, Communicator& control) const {
  summary.seconds = train_seconds_;
  summary.run_samples = samples_;
  const double steady_seconds = train_seconds_ - steady_.seconds;
  if (steady_.step >= 0 && steps_ > steady_.steps && steady_seconds > 0) {
    summary.steady_samples_per_s = static_cast<double>(samples_ - steady_.samples) / steady_seconds;
    summary.steady_from_step = steady_.step;
  }
  summary.wall_start = wall_start_;
  summary.wall_end = unix_now();
  if (ctx_.device.is_cuda()) {
    const MemoryStats m = memory_stats(ctx_.device);
    const DecodeMemory d = decode_memory();
    summary.memory = {m.allocated, m.reserved, m.peak, d.device, d.pinned};
  }
  const MemoryKinds kinds = memory_kinds(ctx_);
  summary.optimizer_state_bytes = kinds.optimizer_state;
  summary.optimizer_shards = kinds.shards;
  summary.weight_bytes = kinds.weights, summary.gradient_bytes = kinds.gradients;
  if (ctx_.world > 1) {  // NCCL's ring algorithms (TrainSummary)
    const double share = static_cast<double>(ctx_.world - 1) / static_cast<double>(ctx_.world);
    auto part = [&](double factor, int64_t bytes) {
      return static_cast<int64_t>(std::llround(factor * share * static_cast<double>(bytes)));
    };
    const StepBytes b = ctx_.data_parallel->bytes_per_step();
    summary.wire_all_reduce_bytes = part(2.0, b.all_reduce);
    summary.wire_reduce_scatter_bytes = part(1.0, b.reduce_scatter);
    summary.wire_broadcast_bytes = part(1.0, b.broadcast);
  }
  if (gpu_) summary.gpu = gpu_->run_mean();
  const PhaseTimes& p = *ctx_.phases;
  at::Tensor mine = at::tensor({p.data, p.compute, p.comm, p.optimizer, p.eval}, at::kDouble);
  const at::Tensor all = control.all_gather(mine).contiguous();
  const double* v = all.data_ptr<double>();
  summary.rank_phases.resize(static_cast<size_t>(control.world()));
  for (int r = 0; r < control.world(); ++r) {
    PhaseTimes& q = summary.rank_phases[static_cast<size_t>(r)];
    q.data = v[5 * r], q.compute = v[5 * r + 1], q.comm = v[5 * r + 2];
    q.optimizer = v[5 * r + 3], q.eval = v[5 * r + 4];
  }
}

}  // namespace dtrain::detail
