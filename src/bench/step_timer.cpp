#include "bench/step_timer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "cuda/device.h"
#include "cuda/graph.h"
#include "cuda/memory.h"
#include "dtrain/error.h"

namespace dtrain::bench {

using detail::Clock;

StepTimer::StepTimer(int64_t warmup_steps, int64_t steps, double gpu_sample_s)
    : warmup_(warmup_steps), steps_(steps), gpu_sample_s_(gpu_sample_s) {}

StepTimer::~StepTimer() = default;

void StepTimer::on_start(const RunInfo& run, LoopControl&) {
  device_ = run.device;
  timing_.micro_batch = run.micro_batch;
  timing_.tokens_per_sample = run.tokens_per_sample;
  timing_.flops_per_sample = run.flops_per_sample;
  timing_.peak_flops = run.peak_flops;
  timing_.device_name = run.device_name;
  if (warmup_ == 0) start(nullptr);
}

void StepTimer::start(const StepRecord* record) {
  detail::synchronize(device_);
  data0_ = record ? record->phases.data : 0;
  comm0_ = record ? record->phases.comm : 0;
  samples0_ = record ? record->samples : 0;
  if (device_.is_cuda())
    gpu_ = std::make_unique<detail::GpuMonitor>(detail::pci_bus_id(device_.index()), gpu_sample_s_);
  t0_ = last_ = Clock::now();
  marks_.mark(device_);
}

void StepTimer::on_step(const StepRecord& r, LoopControl&) {
  if (timing_.complete) return;
  if (r.buckets && !r.buckets->empty()) {
    if (r.step > warmup_)
      timing_.timeline.add(*r.buckets, r.backward_end);
    else if (r.step > 1)  // past the first step, whose plan is rebuilt
      timing_.warmup_timeline = detail::TimelineMean(),
      timing_.warmup_timeline.add(*r.buckets, r.backward_end);
  }
  if (r.step < warmup_) return;
  if (r.step == warmup_) {
    start(&r);
    return;
  }
  const bool last = r.step == warmup_ + steps_;
  marks_.mark(device_);
  if (last) detail::synchronize(device_);
  const Clock::time_point now = Clock::now();
  timing_.step_seconds.push_back(std::chrono::duration<double>(now - last_).count());
  last_ = now;
  if (!last) return;
  // On a GPU, the steps' times on its own clock replace the host's.
  if (std::vector<double> on_gpu = marks_.intervals(); !on_gpu.empty())
    timing_.step_seconds = std::move(on_gpu);
  timing_.complete = true;
  timing_.steps = r.step - warmup_;
  timing_.samples = r.samples - samples0_;
  timing_.seconds = std::chrono::duration<double>(now - t0_).count();
  timing_.data_seconds = r.phases.data - data0_;
  timing_.comm_seconds = r.phases.comm - comm0_;
  // Fewer than 3 samples (the first is taken at start()) would report the warm-up's figures.
  if (gpu_) {
    std::optional<GpuStats> mean = gpu_->run_mean();
    if (mean && mean->samples >= 3) timing_.gpu = mean;
  }
  gpu_.reset();
}

void StepTimer::on_end(TrainSummary& summary) {
  timing_.peak_memory = summary.memory.peak;
  timing_.weight_bytes = summary.weight_bytes, timing_.gradient_bytes = summary.gradient_bytes;
  timing_.memory_total = detail::memory_stats(device_).total;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(i, values.size() - 1)];
}

void fill_row(const Timing& mine, Communicator& control, Row& row) {
  if (!mine.complete || mine.seconds <= 0)
    throw Error("the setting ended after fewer than its timed steps (internal error)");
  const double share = mine.data_seconds / mine.seconds;
  at::Tensor worst = at::tensor(
      {mine.seconds, share, percentile(mine.step_seconds, 0.5), percentile(mine.step_seconds, 0.9),
       static_cast<double>(mine.peak_memory), static_cast<double>(mine.memory_total),
       static_cast<double>(mine.steps), static_cast<double>(mine.samples)},
      at::kDouble);
  at::Tensor least = at::tensor(
      {static_cast<double>(mine.steps), static_cast<double>(mine.samples), mine.comm_seconds},
      at::kDouble);
  at::Tensor gpu =
      at::tensor({mine.gpu ? mine.gpu->utilization : 0.0, mine.gpu ? 1.0 : 0.0}, at::kDouble);
  control.all_reduce(worst, ReduceOp::kMax);
  control.all_reduce(least, ReduceOp::kMin);
  control.all_reduce(gpu, ReduceOp::kSum);
  const auto w = worst.accessor<double, 1>();
  const auto l = least.accessor<double, 1>();
  const auto g = gpu.accessor<double, 1>();
  if (w[6] != l[0] || w[7] != l[1])
    throw Error("the ranks timed different steps or samples in one setting (internal error)");
  row.micro_batch = mine.micro_batch;
  row.timed_seconds = w[0];
  row.data_wait_share = w[1];
  row.step_p50_s = w[2];
  row.step_p90_s = w[3];
  row.peak_memory = static_cast<int64_t>(w[4]);
  row.memory_total = static_cast<int64_t>(w[5]);
  row.timed_steps = mine.steps;
  row.timed_samples = mine.samples;
  row.samples_per_s = static_cast<double>(mine.samples) / row.timed_seconds;
  row.step_mean_s = row.timed_seconds / static_cast<double>(mine.steps);
  row.tokens_per_s = row.samples_per_s * static_cast<double>(mine.tokens_per_sample);
  if (g[1] > 0) row.gpu_utilization = g[0] / g[1];
  row.comm_per_step_s = l[2] / static_cast<double>(mine.steps);
  const detail::TimelineMean& tl = mine.timeline.steps() > 0 ? mine.timeline : mine.warmup_timeline;
  row.buckets = tl.buckets();
  row.backward_end = tl.backward_end();
  row.timeline_steps = tl.steps();
  row.weight_bytes = mine.weight_bytes, row.gradient_bytes = mine.gradient_bytes;
  if (mine.flops_per_sample > 0 && mine.peak_flops > 0)
    row.mfu = row.samples_per_s * mine.flops_per_sample / (mine.peak_flops * control.world());
}

}  // namespace dtrain::bench
