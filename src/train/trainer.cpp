// The training loop: plan the epochs, drive the loader, run each step through a step engine,
// read the loss when due, evaluate at the end of each epoch, and tell the hooks. What a step
// does is in eager_step.cpp and graph_step.cpp; everything around the loop is a hook.
#include "dtrain/trainer.h"

#include <optional>

#include "cuda/memory.h"
#include "dtrain/amp.h"
#include "dtrain/data/loader.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "hooks/hook_list.h"
#include "hooks/standard.h"
#include "runtime/watchdog.h"
#include "train/eager_step.h"
#include "train/evaluator.h"
#include "train/graph_step.h"
#include "train/loss.h"
#include "train/plan.h"
#include "train/recovery.h"
#include "train/requests.h"
#include "train/schedule.h"
#include "train/step_context.h"
#include "util/clock.h"

namespace dtrain {

using detail::Clock;
using detail::seconds_since;

struct Trainer::Impl {
  Impl(const Config& c, Communicator& comm_, Communicator& control_, at::Device device,
       std::shared_ptr<Model> model_, std::shared_ptr<const Dataset> train_,
       std::shared_ptr<const Dataset> test_)
      : cfg(c),
        comm(comm_),
        control(control_),
        model(std::move(model_)),
        train(std::move(train_)),
        test(std::move(test_)),
        watchdog(c.run.timeout_s, comm_.rank()),
        hooks(watchdog) {
    ctx.model = model.get();
    ctx.device = device;
    ctx.watchdog = &watchdog;
    ctx.phases = &phases;
    micro = std::max<int64_t>(1, c.resolved.micro_batch);
  }

  LoaderOptions loader_options() const {
    LoaderOptions lo;
    lo.workers = cfg.data.workers;
    lo.prefetch = cfg.data.prefetch;
    lo.pin_memory = cfg.data.pin_memory;
    lo.device = ctx.device;
    return lo;
  }

  // The mean training loss since the last read, over all ranks (a collective).
  double read_loss(detail::EagerStep& eager, int64_t window_steps) {
    at::Tensor l = at::tensor({eager.take_window_loss(), static_cast<double>(window_steps)}, at::kDouble);
    control.all_reduce(l, ReduceOp::kSum);
    return l[0].item<double>() / l[1].item<double>();
  }

  const Config cfg;
  Communicator& comm;
  Communicator& control;
  std::shared_ptr<Model> model;
  std::shared_ptr<const Dataset> train, test;
  PhaseTimes phases;
  Watchdog watchdog;
  detail::StepContext ctx;
  detail::HookList hooks;
  std::shared_ptr<FaultInjector> faults;
  int64_t step = 0;
  int64_t micro = 1;  // the micro-batch in use (evaluation batches too)
};

Trainer::Trainer(const Config& cfg, Communicator& comm, Communicator& control, at::Device device,
                 std::shared_ptr<Model> model, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test) {
  if (!model) throw Error("Trainer: no model");
  if (!train) throw Error("Trainer: no training data");
  if (cfg.resolved.world != comm.world())
    throw Error("Trainer: the config is resolved for world " + std::to_string(cfg.resolved.world) +
                " but the communicator has " + std::to_string(comm.world()) +
                " rank(s); resolve it for this world first (build_session does)");
  detail::check_loss_fits(cfg.train.loss, train->spec(), train->describe());
  impl_ = std::make_unique<Impl>(cfg, comm, control, device, std::move(model), std::move(train),
                                 std::move(test));
  Impl& m = *impl_;
  m.watchdog.beat("setup");
  if (cfg.run.gpu_memory_fraction > 0) {
    if (!device.is_cuda())
      log::warn("run.gpu_memory_fraction is set but this rank computes on the CPU: ignored");
    detail::set_memory_fraction(device, cfg.run.gpu_memory_fraction);
  }
  const Precision precision = cfg.train.precision;
  if (precision != Precision::kFp32 && !autocast_supported(device, precision))
    log::warn(std::string("this LibTorch has no ") + to_string(precision) + " autocast on " +
              device.str() + ": computing in fp32" +
              (precision == Precision::kFp16 ? " (loss scaling still applies)" : ""));
  detail::build_step_context(m.ctx, cfg, comm, control, m.train->size(),
                             m.test ? m.test->size() : -1);
  for (auto& hook : detail::standard_hooks(cfg)) m.hooks.add(std::move(hook));
}

Trainer::~Trainer() = default;

void Trainer::add_hook(std::shared_ptr<Hook> hook) { impl_->hooks.add(std::move(hook)); }

void Trainer::set_fault_injector(std::shared_ptr<FaultInjector> faults) {
  impl_->faults = std::move(faults);
  impl_->ctx.faults = impl_->faults.get();
}

namespace {

// Settings that leave part of themselves unused: the run goes on, and says so.
void warn_about_limits(const Config& cfg, const detail::StepPlan& plan) {
  const TrainConfig& t = cfg.train;
  if (t.max_steps > plan.total_steps)
    log::warn("train.max_steps " + std::to_string(t.max_steps) + " is more than train.epochs " +
              std::to_string(t.epochs) + " x " + std::to_string(plan.steps_per_epoch) +
              " steps per epoch: training stops after " + std::to_string(plan.total_steps) +
              " steps (raise train.epochs to train longer)");
  if (t.warmup_steps >= plan.total_steps && t.warmup_steps > 0)
    log::warn("train.warmup_steps " + std::to_string(t.warmup_steps) + " is not less than the " +
              std::to_string(plan.total_steps) + " steps of the run: the learning rate never "
              "reaches train.lr");
  if (cfg.run.profile_steps > 0 && cfg.run.profile_start >= plan.total_steps)
    log::warn("run.profile_start " + std::to_string(cfg.run.profile_start) + " is past the " +
              std::to_string(plan.total_steps) + " steps of the run: the profiler records nothing");
}

}  // namespace

TrainSummary Trainer::fit() {
  Impl& m = *impl_;
  const TrainConfig& t = m.cfg.train;
  const int world = m.comm.world(), rank = m.comm.rank();
  const int64_t rank_batch = m.cfg.resolved.rank_batch;
  const int64_t first_micro = m.cfg.resolved.micro_batch < 0
                                  ? detail::find_micro_batch(m.ctx, *m.train, rank_batch)
                                  : m.cfg.resolved.micro_batch;
  detail::MicroBatch micro(rank_batch, first_micro, t.global_batch);
  detail::StepPlan plan = detail::plan_steps(m.cfg, m.train->size(), world, rank);
  if (rank == 0) warn_about_limits(m.cfg, plan);
  const detail::LrSchedule lr(t, plan.total_steps);
  detail::EagerStep eager(m.ctx, micro);
  detail::GraphStep graph(m.ctx, eager, micro, t.cuda_graph, rank_batch);

  RunInfo info;
  info.config = &m.cfg;
  info.rank = rank;
  info.world = world;
  info.device = m.ctx.device;
  info.steps_per_epoch = plan.steps_per_epoch;
  info.total_steps = plan.total_steps;
  info.micro_batch = micro.size();
  info.run_dir = m.cfg.run.run_dir();
  info.data = m.train->spec();
  info.train_samples = m.train->size();
  info.test_samples = m.test ? m.test->size() : 0;
  for (const auto& p : m.ctx.params) info.parameters += p.numel();
  LoopControl control;
  detail::RequestAgreement agree(m.control);
  m.hooks.on_start(info, control);

  TrainSummary summary;
  int64_t epoch = 0;
  auto save = [&](int asked_by) {
    TrainState state{m.step, epoch + 1, summary.samples, m.model.get(), m.ctx.optimizer.get(),
                     &m.cfg, asked_by};
    if (!m.hooks.on_save(state))
      log::info("a save was asked for after step " + std::to_string(m.step) +
                " (by a hook on rank " + std::to_string(asked_by) +
                "), but no hook writes checkpoints: nothing was saved");
  };
  auto act = [&](const detail::Agreed& a) {
    if (a.save()) save(a.save_by);
    if (a.stop()) summary.stopped = true, summary.stopped_by = a.stop_by;
    return a.stop();
  };

  Loader loader(m.train, std::move(plan.batches), m.loader_options());
  int64_t window_steps = 0;
  auto window_start = Clock::now();
  double train_seconds = 0;
  for (; epoch < t.epochs && !summary.stopped && m.step < plan.total_steps; ++epoch) {
    m.model->train();
    const auto epoch_start = Clock::now();
    for (int64_t s = 0; s < plan.steps_per_epoch && m.step < plan.total_steps; ++s) {
      m.watchdog.beat("waiting for data");
      const auto t0 = Clock::now();
      std::optional<Batch> batch = loader.next();
      m.phases.data += seconds_since(t0);
      if (!batch) throw Error("the loader ran out of batches (internal error)");
      m.hooks.on_step_begin(m.step);
      const double step_lr = lr.at(m.step);
      if (!graph.run(*batch, m.step, step_lr)) eager.run(*batch, m.step, step_lr);
      ++m.step;
      ++window_steps;
      summary.samples += batch->size() * world;
      StepRecord rec;
      rec.step = m.step;
      rec.epoch = epoch + 1;
      rec.epochs = t.epochs;
      rec.total_steps = plan.total_steps;
      rec.samples = summary.samples;
      rec.lr = step_lr;
      rec.micro_batch = micro.size();
      if (m.cfg.run.log_every > 0 && m.step % m.cfg.run.log_every == 0) {
        rec.loss = summary.last_loss = m.read_loss(eager, window_steps);
        rec.samples_per_s = static_cast<double>(window_steps * t.global_batch) / seconds_since(window_start);
        window_steps = 0;
        window_start = Clock::now();
      }
      rec.phases = m.phases;
      m.hooks.on_step(rec, control);
      if (act(agree.at_step(control))) break;
    }
    train_seconds += seconds_since(epoch_start);
    if (window_steps > 0) {
      summary.last_loss = m.read_loss(eager, window_steps);
      window_steps = 0;
    }
    if (!summary.stopped && t.eval && m.test) {
      const auto t0 = Clock::now();
      m.micro = micro.size();
      summary.eval = evaluate();
      m.phases.eval += seconds_since(t0);
      EvalRecord rec;
      rec.step = m.step;
      rec.epoch = epoch + 1;
      rec.epochs = t.epochs;
      rec.train_loss = summary.last_loss;
      rec.epoch_seconds = seconds_since(epoch_start);
      rec.result = summary.eval;
      m.hooks.on_eval(rec, control);
      act(agree.now(control));
    }
    window_start = Clock::now();
  }
  if (epoch > 0) --epoch;  // the epoch of the last step
  act(agree.now(control));  // what was asked for in the last step

  m.micro = micro.size();
  summary.step_mode = graph.story();
  summary.steps = m.step;
  summary.seconds = train_seconds;
  summary.phases = m.phases;
  summary.oom_retries = micro.retries();
  summary.skipped_steps = eager.skipped_steps();
  summary.micro_batch = micro.size();
  if (m.ctx.reducer) {
    summary.buckets = m.ctx.reducer->last_timeline();
    summary.backward_end = m.ctx.reducer->last_backward_end();
  }
  m.hooks.on_end(summary);
  m.watchdog.beat("done");
  return summary;
}

EvalResult Trainer::evaluate() {
  return detail::evaluate(impl_->ctx, impl_->test, impl_->micro, impl_->loader_options());
}

Model& Trainer::model() { return *impl_->model; }
const Config& Trainer::config() const { return impl_->cfg; }
int64_t Trainer::step() const { return impl_->step; }

}  // namespace dtrain
