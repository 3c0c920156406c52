// The training loop: plan the epochs, drive the loader, run each step through a step engine,
// read the loss when due, evaluate at the end of each epoch, and tell the hooks. What a step
// does is in eager_step.cpp and graph_step.cpp; everything around the loop is a hook.
#include "dtrain/trainer.h"

#include <ATen/core/grad_mode.h>

#include <optional>

#include "cuda/memory.h"
#include "cuda/streams.h"
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
#include "train/loss_window.h"
#include "train/loss.h"
#include "train/plan.h"
#include "train/recovery.h"
#include "train/requests.h"
#include "train/resume.h"
#include "train/run_directory.h"
#include "train/schedule.h"
#include "train/step_context.h"
#include "train/telemetry.h"
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
        watchdog(c.run.timeout_s, comm_.rank(), control_.mpi_handle()),
        hooks(watchdog) {
    // When the watchdog fires, no thread may stay inside a collective (NCCL) as the job ends.
    watchdog.on_fire([this] { comm.abort(); });
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
  bool oom_recovery = true;
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
  if (m.test && (m.test->spec().pixel_mean != m.train->spec().pixel_mean ||
                 m.test->spec().pixel_std != m.train->spec().pixel_std))
    throw Error("the test split's pixel statistics differ from the training split's (" +
                m.test->describe() + ", " + m.train->describe() + "); both are standardized alike");
  m.ctx.pixels = detail::PixelNormalizer(m.train->spec(), device);
  if (m.train->size() > 0) {
    // The model's outputs against the data's classes or targets, on one training sample in
    // evaluation mode (no dropout drawn, no batch-norm statistics moved), before training.
    m.watchdog.beat("output check");
    const Batch one = m.train->get({0});
    const bool was_training = m.model->is_training();
    m.model->eval();
    at::Tensor out;
    {
      at::NoGradGuard no_grad;
      out = m.model->forward(m.ctx.pixels(one.inputs.to(device)));
    }
    m.model->train(was_training);
    detail::check_outputs_fit(m.train->spec(), out, one.targets, m.model->name(), m.train->describe());
  }
  for (auto& hook : detail::standard_hooks(cfg, *m.model)) m.hooks.add(std::move(hook));
}

Trainer::~Trainer() = default;

void Trainer::add_hook(std::shared_ptr<Hook> hook) { impl_->hooks.add(std::move(hook)); }

void Trainer::set_fault_injector(std::shared_ptr<FaultInjector> faults) {
  impl_->faults = std::move(faults);
  impl_->ctx.faults = impl_->faults.get();
}

void Trainer::set_out_of_memory_recovery(bool on) { impl_->oom_recovery = on; }

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
  const CheckpointConfig& ck = m.cfg.checkpoint;
  // The save schedule runs when checkpoints have a folder (requested saves always reach hooks).
  const bool scheduled = !ck.folder(m.cfg.run).empty();
  const int64_t every_steps = scheduled ? ck.every_steps : 0;
  const bool every_epoch = scheduled && ck.every_epoch;
  const int world = m.comm.world(), rank = m.comm.rank();
  const int64_t rank_batch = m.cfg.resolved.rank_batch;
  detail::RunDirectory run_dir(m.cfg, m.control);
  const std::optional<detail::ResumePoint> from = detail::resume(m.ctx, m.cfg, m.control);
  run_dir.check_fresh_start(from.has_value(), m.control);
  const detail::LoopPosition start = from ? from->position : detail::LoopPosition{};
  const bool same_world = from && from->saved_world == world;
  const int64_t first_micro = same_world ? start.micro_batch
                              : m.cfg.resolved.micro_batch < 0
                                  ? detail::find_micro_batch(m.ctx, *m.train, rank_batch)
                                  : m.cfg.resolved.micro_batch;
  detail::MicroBatch micro(rank_batch, first_micro, t.global_batch, m.oom_recovery);
  detail::StepPlan plan = detail::plan_steps(m.cfg, m.train->size(), world, rank, start.step);
  if (from && start.steps_per_epoch != plan.steps_per_epoch)
    throw Error("an epoch has " + std::to_string(plan.steps_per_epoch) + " steps in this run but " +
                    std::to_string(start.steps_per_epoch) + " in the checkpoint: cannot resume",
                from->path);
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
  if (from) {
    info.resumed_from = from->path, info.resumed_step = start.step;
    info.resumed_samples = start.samples;
  }
  info.control = &m.control;
  detail::describe_throughput(info, *m.model, m.cfg);
  detail::StepTelemetry telemetry(m.ctx, m.cfg);
  LoopControl control;
  detail::RequestAgreement agree(m.control);
  m.hooks.on_start(info, control);

  TrainSummary summary;
  m.step = start.step;
  summary.samples = start.samples;
  summary.last_loss = start.last_loss;
  // Where the loop starts: the checkpoint's step; at an epoch's end whose loss read and
  // evaluation had not run yet, with that end.
  int64_t epoch = m.step / plan.steps_per_epoch, first_s = m.step % plan.steps_per_epoch;
  if (from && first_s == 0 && m.step > 0 && !start.epoch_end_done) --epoch, first_s = plan.steps_per_epoch;
  detail::LossWindow window(eager, m.control, m.watchdog, t.precision, m.step);
  if (from) window.restore(start, from->saved_world);
  bool epoch_end_done = start.epoch_end_done;
  int64_t saved_step = from ? m.step : -1;
  auto save = [&](int asked_by, const std::string& reason) {
    TrainState st;
    st.step = m.step;
    st.epoch = epoch + 1;
    st.samples = summary.samples;
    st.steps_per_epoch = plan.steps_per_epoch;
    st.epoch_end_done = epoch_end_done;
    st.micro_batch = micro.size();
    st.window_loss = window.total();  // also: no checkpoint of a diverged model
    st.window_steps = window.steps();
    st.last_loss = summary.last_loss;
    st.model = m.model.get();
    st.optimizer = m.ctx.optimizer.get();
    st.scaler = m.ctx.scaler.get();
    st.config = &m.cfg;
    st.control = &m.control;
    st.device = m.ctx.device;
    st.rank = rank;
    st.world = world;
    st.asked_by = asked_by;
    st.reason = reason;
    const bool written = m.hooks.on_save(st);
    if (written) saved_step = m.step;
    if (!written && asked_by >= 0)
      log::info("a save was asked for after step " + std::to_string(m.step) + " (by rank " +
                std::to_string(asked_by) + ": " + reason +
                "), but no hook writes checkpoints (run.dir and checkpoint.dir are empty)");
  };
  auto act = [&](const detail::Agreed& a) {
    if (a.save()) save(a.save_by, a.signal ? "stop signal" : "asked by a hook");
    if (a.stop()) summary.stopped = true, summary.stopped_by = a.stop_by, summary.stop_signal = a.signal;
    return a.stop();
  };

  Loader loader(m.train, std::move(plan.batches), m.loader_options(), std::move(plan.epochs));
  detail::QueueMark queued;  // the end of the last step's GPU work
  int64_t rate_steps = 0;
  auto window_start = Clock::now();
  double train_seconds = 0;
  // A resumed run that had finished (its last end of epoch included) has nothing left to do.
  const bool finished = from && m.step >= plan.total_steps && start.epoch_end_done;
  for (; !finished && epoch < t.epochs && !summary.stopped; ++epoch, first_s = 0) {
    m.model->train();
    const auto epoch_start = Clock::now();
    for (int64_t s = first_s; s < plan.steps_per_epoch && m.step < plan.total_steps; ++s) {
      m.watchdog.beat("waiting for data", m.step + 1);
      const auto t0 = Clock::now();
      std::optional<Batch> batch = loader.next();
      // Note [data wait]: a wait the GPU did not see (it still had queued steps) is compute.
      (queued.pending() ? m.phases.compute : m.phases.data) += seconds_since(t0);
      if (!batch) throw Error("the loader ran out of batches (internal error)");
      m.hooks.on_step_begin(m.step);
      const double step_lr = lr.at(m.step);
      if (!graph.run(*batch, m.step, step_lr)) eager.run(*batch, m.step, step_lr);
      queued.record(m.ctx.device);
      ++m.step;
      window.add_step();
      ++rate_steps;
      epoch_end_done = false;
      summary.samples += batch->size() * world;
      StepRecord rec;
      rec.step = m.step;
      rec.epoch = epoch + 1;
      rec.epochs = t.epochs;
      rec.total_steps = plan.total_steps;
      rec.samples = summary.samples;
      rec.lr = step_lr;
      rec.micro_batch = micro.size();
      rec.phases = m.phases;
      // The loss is read every run.log_every steps and at the last step of each epoch and of
      // the run, so that every run has a record of its end.
      const bool last = s + 1 == plan.steps_per_epoch || m.step == plan.total_steps;
      if ((m.cfg.run.log_every > 0 && m.step % m.cfg.run.log_every == 0) || last) {
        // Reading the loss waits for the GPU to finish the steps queued so far (CUDA graph
        // replays return at once): that wait is compute, as in Note [data wait].
        const auto tr = Clock::now();
        rec.loss = summary.last_loss = window.read(m.step);
        m.phases.compute += seconds_since(tr);
        rec.phases = m.phases;
        rec.samples_per_s = static_cast<double>(rate_steps * t.global_batch) / seconds_since(window_start);
        rec.window_steps = rate_steps;
        telemetry.fill_window(rec);
        rate_steps = 0;
        window_start = Clock::now();
      }
      telemetry.fill_step(rec);
      m.hooks.on_step(rec, control);
      if (every_steps > 0 && m.step % every_steps == 0) save(-1, "checkpoint.every_steps");
      if (act(agree.at_step(control))) break;
    }
    train_seconds += seconds_since(epoch_start);
    if (window.steps() > 0) {
      const auto tr = Clock::now();
      summary.last_loss = window.read(m.step);
      m.phases.compute += seconds_since(tr);
    }
    if (summary.stopped) break;  // at a step boundary: this epoch's end has not come
    epoch_end_done = true;
    if (t.eval && m.test) {
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
    if (every_epoch && saved_step != m.step) save(-1, "end of epoch " + std::to_string(epoch + 1));
    window_start = Clock::now();
    rate_steps = 0;
    if (m.step >= plan.total_steps) break;
  }
  epoch = m.step > 0 ? (m.step - 1) / plan.steps_per_epoch : 0;  // the epoch of the last step
  act(agree.now(control));  // what was asked for in the last step
  if ((every_steps > 0 || every_epoch) && saved_step != m.step && !summary.stopped)
    save(-1, "end of training");
  if (finished) log::info("the checkpoint is at the end of training: nothing left to do");

  m.micro = micro.size();
  summary.step_mode = graph.story();
  summary.steps = m.step;
  summary.seconds = train_seconds;
  summary.phases = m.phases;
  summary.oom_retries = micro.retries();
  summary.skipped_steps = eager.skipped_steps();
  summary.micro_batch = micro.size();
  telemetry.fill_summary(summary, m.control);
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

}  // namespace dtrain
