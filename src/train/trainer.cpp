// The training loop: plan the epochs, drive the loader, run each step through a step engine,
// read the loss when due, evaluate at the end of each epoch, and tell the hooks. What a step
// does is in eager_step.cpp and graph_step.cpp; everything around the loop is a hook.
#include "dtrain/trainer.h"

#include <ATen/core/grad_mode.h>

#include <optional>

#include "cuda/memory.h"
#include "cuda/streams.h"
#include "dist/batch_norm_buffers.h"
#include "dtrain/amp.h"
#include "dtrain/data/loader.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "hooks/hook_list.h"
#include "hooks/standard.h"
#include "runtime/watchdog.h"
#include "train/context_build.h"
#include "train/cursor.h"
#include "train/eager_step.h"
#include "train/evaluator.h"
#include "train/graph_step.h"
#include "train/loss.h"
#include "train/loss_window.h"
#include "train/plan.h"
#include "train/recovery.h"
#include "train/requests.h"
#include "train/resume.h"
#include "train/run_directory.h"
#include "train/schedule.h"
#include "train/start_up.h"
#include "train/start_up_memory.h"
#include "train/step_context.h"
#include "train/telemetry.h"
#include "util/clock.h"

namespace dtrain {

using detail::Clock;
using detail::seconds_since;

struct Trainer::Impl {
  Impl(const Config& c, Communicator& comm_, Communicator& control_, at::Device device,
       std::shared_ptr<Model> model_, std::shared_ptr<const Dataset> train_,
       std::shared_ptr<const Dataset> test_, std::shared_ptr<FaultInjector> faults_)
      : cfg(c),
        comm(comm_),
        control(control_),
        model(std::move(model_)),
        train(std::move(train_)),
        test(std::move(test_)),
        watchdog(c.run.timeout_s, comm_.rank(), control_.mpi_handle()),
        hooks(watchdog),
        faults(std::move(faults_)) {
    // When the watchdog fires, no thread may stay inside a collective (NCCL) as the job ends.
    watchdog.on_fire([this] { comm.abort(); });
    ctx.model = model.get();
    ctx.device = device;
    ctx.watchdog = &watchdog;
    ctx.phases = &phases;
    ctx.faults = faults.get();
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
  std::shared_ptr<const Dataset> train, test, val;  // val: data.val_fraction's (set_validation)
  PhaseTimes phases;
  detail::Watchdog watchdog;
  detail::StepContext ctx;
  detail::HookList hooks;
  std::shared_ptr<FaultInjector> faults;
  int64_t micro = 1;  // the micro-batch in use (evaluation batches too)
  bool oom_recovery = true, length_warnings = true;

  struct Fit;
};

Trainer::Trainer(const Config& cfg, Communicator& comm, Communicator& control, at::Device device,
                 std::shared_ptr<Model> model, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, std::shared_ptr<FaultInjector> faults) {
  if (!model) throw Error("Trainer: no model");
  if (!train) throw Error("Trainer: no training data");
  if (cfg.resolved.world != comm.world())
    throw Error("Trainer: the config is resolved for world " + std::to_string(cfg.resolved.world) +
                " but the communicator has " + std::to_string(comm.world()) +
                " rank(s); resolve it for this world first (build_session does)");
  impl_ = std::make_unique<Impl>(cfg, comm, control, device, std::move(model), std::move(train),
                                 std::move(test), std::move(faults));
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
  if (comm.rank() == 0 && !autocast_slowdown(device, precision).empty())
    log::warn(autocast_slowdown(device, precision));
  detail::build_step_context(m.ctx, cfg, comm, control, m.train->size(),
                             m.test ? m.test->size() : -1);
  if (m.test && (m.test->spec().pixel_mean != m.train->spec().pixel_mean ||
                 m.test->spec().pixel_std != m.train->spec().pixel_std))
    throw Error("the test split's pixel statistics differ from the training split's (" +
                m.test->describe() + ", " + m.train->describe() + "); both are standardized alike");
  if (cfg.train.eval_every_steps > 0 && !m.test && cfg.data.val_fraction <= 0)
    throw Error("the data has no test split to evaluate on (" + m.train->describe() +
                    "): set train.eval_every_steps=0, or give the data a test split",
                "train.eval_every_steps");
  m.ctx.pixels = detail::PixelNormalizer(m.train->spec(), device);
  m.ctx.mix = detail::make_batch_mix(cfg, m.train->spec().num_classes, device, comm.rank());
  if (cfg.train.ema_decay > 0)
    m.ctx.ema = std::make_unique<detail::WeightAverage>(*m.model, cfg.train);
  // The data against the loss and the model's outputs, agreed (Note [data errors]).
  detail::check_data_fits(m.ctx, cfg.train.loss, *m.train, control);
  for (auto& hook : detail::standard_hooks(cfg, *m.model)) m.hooks.add(std::move(hook), true);
}

Trainer::~Trainer() = default;

void Trainer::add_hook(std::shared_ptr<Hook> hook) { impl_->hooks.add(std::move(hook)); }

bool Trainer::remove_hook(const std::string& name) { return impl_->hooks.remove(name); }

void Trainer::set_fault_injector(std::shared_ptr<FaultInjector> faults) {
  impl_->faults = std::move(faults);
  impl_->ctx.faults = impl_->faults.get();
}

void Trainer::set_out_of_memory_recovery(bool on) { impl_->oom_recovery = on; }
void Trainer::set_length_warnings(bool on) { impl_->length_warnings = on; }

// One fit() call: what the loop works with, built before its first step (the resume decision,
// the micro-batch, the step plan, the engines; the hooks' on_start; then the loader, in the order
// of Note [start-up order]), and the pieces of the loop that are not its outline: the records, a
// save, the loss reads, an epoch's evaluation, the end.
struct Trainer::Impl::Fit {
  explicit Fit(Impl& impl)
      : Fit(impl, detail::start_up(impl.ctx, impl.cfg, impl.control, *impl.train)) {}

  std::optional<Batch> next_batch();
  // The epochs the run reaches: train.epochs, fewer when train.max_steps ends it sooner.
  int64_t epochs_reached() const {
    return std::min(t.epochs, (plan.total_steps + plan.steps_per_epoch - 1) / plan.steps_per_epoch);
  }
  StepRecord step_record(double lr) const;
  // Where the loop stands, for a save (the loss window's total: a collective).
  LoopPosition position();
  // Reads the loss window into `rec` (every rank: a collective), with what goes with it.
  void read_loss(StepRecord& rec);
  // At an epoch's end: the loss of the steps since the last read.
  void read_rest();
  // Moves the data seconds the DataWaitClock has settled from compute to data (Note [data wait]).
  void settle_data_wait(bool wait_for_gpu);
  // Every rank's BatchNorm running statistics averaged into one set, before an evaluation, a
  // save or the end reads them, when steps have run since the last time (Note [BatchNorm on N
  // ranks]; a collective, at the same point on every rank).
  void one_set_of_statistics();
  // What a save writes, for on_save() and prepare_save() (no hook states: save() adds them).
  TrainState train_state(int asked_by, const std::string& reason);
  void save(int asked_by, const std::string& reason);
  // Carries out what the ranks agreed on; whether training stops.
  bool act(const detail::Agreed& a);
  bool evaluate();  // true: a stop was agreed on after it
  bool evaluate_within_epoch();
  TrainSummary finish();

  Impl& m;
  const TrainConfig& t;
  const int world, rank;
  std::unique_ptr<detail::RunDirectory> run_dir;  // held (its lock) until fit() returns
  const std::optional<detail::ResumePoint> from;  // a resumed run's checkpoint
  detail::MicroBatch micro;
  detail::StepPlan plan;
  detail::LoopCursor at;
  const detail::ResumedSchedule resumed_lr;  // where the schedule starts, what the resume says
  const detail::LrSchedule lr;
  detail::LossWindow window;
  detail::EagerStep eager;
  std::optional<detail::GraphStep> graph;          // made in the constructor's body (it agrees)
  std::optional<detail::StepTelemetry> telemetry;  // its clocks start once the engines are made
  LoopControl control;
  detail::RequestAgreement agree;
  TrainSummary summary;
  std::optional<Loader> loader;
  detail::DataWaitClock data_wait;  // Note [data wait]
  int64_t averaged_at = -1;         // the step whose BatchNorm statistics are one set on every rank

 private:
  Fit(Impl& impl, detail::StartUp s);
  RunInfo run_info() const;
};

TrainSummary Trainer::fit() {
  Impl::Fit f(*impl_);
  Impl& m = *impl_;
  detail::LoopCursor& at = f.at;
  f.telemetry->restart_rate();
  for (; at.more_epochs(f.summary.stopped); at.next_epoch()) {
    m.model->train();
    f.telemetry->epoch_begins();
    for (int64_t s = at.first_in_epoch(); at.runs(s); ++s) {
      const std::optional<Batch> batch = f.next_batch();
      m.hooks.on_step_begin(at.step());
      const double step_lr = f.lr.at(at.step());
      if (m.ctx.mix) m.ctx.mix->draw(at.epoch(), at.step(), batch->inputs);
      if (!f.graph->run(*batch, at.step(), step_lr)) f.eager.run(*batch, at.step(), step_lr);
      f.data_wait.step_queued(m.ctx.device);
      at.step_done();
      if (m.ctx.ema) m.ctx.ema->after_step(at.step());
      f.window.add_step();
      f.telemetry->step_done(batch->size() * f.world);
      f.summary.samples += batch->size() * f.world;
      StepRecord rec = f.step_record(step_lr);
      if (at.read_due(s)) f.read_loss(rec);
      f.telemetry->fill_step(rec);
      m.hooks.on_step(rec, f.control);
      if (at.eval_due(s) && f.evaluate_within_epoch()) break;
      const bool stop = f.act(f.agree.at_step(f.control));
      if (at.save_due())
        f.save(-1, "checkpoint.every_steps");  // after act: it records an early stop
      if (stop) break;
    }
    f.telemetry->epoch_ends();
    f.read_rest();
    if (f.summary.stopped) break;  // at a step boundary: this epoch's end has not come
    at.epoch_ended();
    if (f.t.eval && (m.test || m.val)) f.evaluate();
    if (at.epoch_save_due())
      f.save(-1, at.step() % f.plan.steps_per_epoch == 0
                     ? "end of epoch " + std::to_string(at.epoch() + 1)
                     : "end of training at step " + std::to_string(at.step()) +
                           " (train.max_steps), within epoch " + std::to_string(at.epoch() + 1));
    f.telemetry->restart_rate();
    if (at.last_step()) break;
  }
  return f.finish();
}

// The loop's objects, from what start_up() settled; then the rest of Note [start-up order]: the
// engines and the hooks' start, as statements in this body.
Trainer::Impl::Fit::Fit(Impl& impl, detail::StartUp s)
    : m(impl),
      t(impl.cfg.train),
      world(impl.comm.world()),
      rank(impl.comm.rank()),
      run_dir(std::move(s.run_dir)),
      from(std::move(s.from)),
      micro(impl.cfg.resolved.rank_batch, s.micro_batch, t.global_batch, impl.oom_recovery),
      plan(std::move(s.plan)),
      at(impl.cfg, from ? &from->position : nullptr, plan.steps_per_epoch, plan.total_steps,
         /*saves=*/!impl.cfg.checkpoint.folder(impl.cfg.run).empty()),
      resumed_lr(detail::resumed_schedule(impl.cfg, plan.total_steps, from ? &*from : nullptr)),
      lr(t, plan.total_steps, resumed_lr.start),
      window(impl.ctx, at.step()),
      eager(impl.ctx, micro, window),
      agree(impl.control) {
  // The CUDA graph's engine agrees whether every rank captures; the run's clocks start after it.
  graph.emplace(m.ctx, eager, micro, t.cuda_graph, m.cfg.resolved.rank_batch);
  telemetry.emplace(m.ctx, m.cfg);
  // A finished run stays as it is: its reports and files are not written again. Every rank
  // holds the same agreed resume point (resume.cpp), so every rank throws here together and the
  // error is printed once, by rank 0, without an abort.
  if (at.finished())
    throw AgreedError(detail::finished_run_error(from->position, t), from->path, /*first_rank=*/0);
  averaged_at = at.step();  // rank 0's broadcast, or one checkpoint's
  if (rank == 0 && m.length_warnings) detail::warn_about_limits(m.cfg, plan);
  if (rank == 0 && !resumed_lr.line.empty()) log::info(resumed_lr.line);
  if (run_dir) run_dir->mark_started();
  m.hooks.on_start(run_info(), control);
  if (from) {
    m.hooks.restore(from->hook_states, at.step());
    summary.samples = from->position.samples;
    summary.last_loss = from->position.last_loss;
    window.restore(from->position, from->saved_world);
  }
  loader.emplace(m.train, std::move(plan.batches), m.loader_options(), std::move(plan.epochs));
  m.hooks.prepare_save(train_state(-1, "before the first step"));
}

RunInfo Trainer::Impl::Fit::run_info() const {
  RunInfo info;
  info.config = &m.cfg;
  info.rank = rank, info.world = world;
  info.device = m.ctx.device;
  info.steps_per_epoch = plan.steps_per_epoch, info.total_steps = plan.total_steps;
  info.micro_batch = micro.size();
  info.run_dir = m.cfg.run.run_dir();
  info.data = m.train->spec();
  info.train_samples = m.train->size();
  info.test_samples = m.test ? m.test->size() : 0;
  for (const auto& p : m.ctx.params) info.parameters += p.numel();
  if (from) {
    info.resumed_from = from->path, info.resumed_step = from->position.step;
    info.resumed_samples = from->position.samples;
  }
  info.control = &m.control;
  detail::describe_throughput(info, *m.model, m.cfg);
  return info;
}

std::optional<Batch> Trainer::Impl::Fit::next_batch() {
  m.watchdog.beat("waiting for data", at.step() + 1);
  const auto t0 = Clock::now();
  std::optional<Batch> batch = loader->next();
  // Compute until the GPU's clock says how much of it the GPU starved (Note [data wait]).
  const double waited = seconds_since(t0);
  m.phases.compute += waited;
  data_wait.batch_arrived(m.ctx.device, waited);
  settle_data_wait(false);
  if (!batch) throw Error("the loader ran out of batches (internal error)");
  return batch;
}

StepRecord Trainer::Impl::Fit::step_record(double step_lr) const {
  StepRecord rec;
  rec.step = at.step();
  rec.epoch = at.epoch() + 1, rec.epochs = epochs_reached();
  rec.total_steps = plan.total_steps;
  rec.samples = summary.samples;
  rec.lr = step_lr;
  rec.micro_batch = micro.size();
  rec.phases = m.phases;
  return rec;
}

void Trainer::Impl::Fit::read_loss(StepRecord& rec) {
  // Reading the loss waits for the GPU to finish the steps queued so far (CUDA graph replays
  // return at once): that wait is compute, as in Note [data wait].
  const auto tr = Clock::now();
  rec.loss = summary.last_loss = window.read(at.step());
  m.phases.compute += seconds_since(tr);
  settle_data_wait(true);  // the GPU is past every mark now: no wait
  rec.phases = m.phases;
  telemetry->fill_window(rec);
}

void Trainer::Impl::Fit::read_rest() {
  if (window.steps() == 0) return settle_data_wait(true);
  const auto tr = Clock::now();
  summary.last_loss = window.read(at.step());
  m.phases.compute += seconds_since(tr);
  settle_data_wait(true);
}

void Trainer::Impl::Fit::settle_data_wait(bool wait_for_gpu) {
  const double data = data_wait.settle(wait_for_gpu);
  m.phases.compute -= data;
  m.phases.data += data;
}

LoopPosition Trainer::Impl::Fit::position() {
  LoopPosition p;
  p.step = at.step();
  p.steps_per_epoch = plan.steps_per_epoch;
  p.epoch_end_done = at.epoch_end_done();
  p.samples = summary.samples;
  p.micro_batch = micro.size();
  p.window_loss = window.total();  // also: no checkpoint of a diverged model
  p.window_steps = window.steps();
  p.last_loss = summary.last_loss;
  p.schedule_start = resumed_lr.start;
  p.stopped_early = summary.stopped && summary.stop_signal == 0;  // the run ends here
  p.stop_reason = summary.stop_reason;
  return p;
}

void Trainer::Impl::Fit::one_set_of_statistics() {
  if (averaged_at == at.step() || m.ctx.sync_batch_norm) return;
  m.watchdog.beat("BatchNorm statistics", at.step());
  detail::average_batch_norm_buffers(*m.model, m.comm);
  if (m.ctx.ema) detail::average_batch_norm_buffers(m.ctx.ema->named(), m.comm);  // EMA's too
  averaged_at = at.step();
}

TrainState Trainer::Impl::Fit::train_state(int asked_by, const std::string& reason) {
  TrainState st;
  st.position = position();
  st.epoch = at.epoch() + 1;
  st.model = m.model.get();
  st.optimizer = m.ctx.optimizer.get();
  st.optimizer_is_shard = m.ctx.data_parallel->sharded();
  st.scaler = m.ctx.scaler.get();
  if (m.ctx.ema) st.ema = m.ctx.ema->named(), st.ema_updates = m.ctx.ema->updates();
  st.config = &m.cfg;
  st.control = &m.control;
  st.device = m.ctx.device;
  st.rank = rank, st.world = world;
  st.asked_by = asked_by, st.reason = reason;
  return st;
}

void Trainer::Impl::Fit::save(int asked_by, const std::string& reason) {
  one_set_of_statistics();
  TrainState st = train_state(asked_by, reason);
  st.hook_states = m.hooks.states(at.step());
  const bool written = m.hooks.on_save(st);
  if (written) at.saved();
  if (!written && asked_by >= 0)
    log::info("a save was asked for after step " + std::to_string(at.step()) + " (by rank " +
              std::to_string(asked_by) + ": " + reason +
              "), but no hook writes checkpoints (run.dir and checkpoint.dir are empty)");
}

bool Trainer::Impl::Fit::act(const detail::Agreed& a) {
  // The stop first: a save at it records whether the run ends there (a hook's stop, no signal).
  if (a.stop()) {
    summary.stopped = true, summary.stopped_by = a.stop_by, summary.stop_signal = a.signal;
    if (a.signal == 0) summary.stop_reason = control.stop_reason();
  }
  if (a.save()) save(a.save_by, a.signal ? "stop signal" : "asked by a hook");
  return a.stop();
}

bool Trainer::Impl::Fit::evaluate_within_epoch() {
  // train.eval_every_steps: the test split mid-epoch (the step's loss was read: read_due); its
  // time is not training time.
  telemetry->pause();
  const bool stop = evaluate();
  telemetry->go_on();
  return stop;
}

bool Trainer::Impl::Fit::evaluate() {
  one_set_of_statistics();
  const auto t0 = Clock::now();
  m.micro = micro.size();
  EvalRecord rec;
  detail::evaluate_splits(m.ctx, m.test, m.val, m.micro, m.loader_options(), t.ema_output, rec);
  summary.eval = rec.result;
  summary.eval_step = at.step();
  m.phases.eval += seconds_since(t0);
  rec.step = at.step();
  rec.epoch = at.epoch() + 1, rec.epochs = epochs_reached();
  rec.steps_per_epoch = plan.steps_per_epoch, rec.total_steps = plan.total_steps;
  rec.train_loss = summary.last_loss;
  rec.epoch_seconds = telemetry->epoch_seconds();
  m.hooks.on_eval(rec, control);
  if (m.ctx.ema && m.ctx.ema->swapped()) m.ctx.ema->swap();  // the model's weights train on
  return act(agree.now(control));
}

TrainSummary Trainer::Impl::Fit::finish() {
  at.settle();              // the epoch of the last step, for a final save
  act(agree.now(control));  // what was asked for in the last step
  if (at.final_save_due(summary.stop_signal != 0))
    save(-1, summary.stopped ? "early stop" : "end of training");
  one_set_of_statistics();  // model.pt, and what the program does with the model after fit()
  if (m.ctx.ema && t.ema_output) m.ctx.ema->swap();  // model.pt holds the weight average
  m.micro = micro.size();
  summary.step_mode = graph->story();
  summary.steps = at.step();
  summary.total_steps = plan.total_steps;
  summary.phases = m.phases;
  summary.oom_retries = micro.retries();
  summary.skipped_steps = eager.skipped_steps();
  summary.micro_batch = micro.size();
  telemetry->fill_summary(summary, m.control);
  summary.buckets = m.ctx.data_parallel->last_timeline();  // none without a gradient engine
  summary.backward_end = m.ctx.data_parallel->last_backward_end();
  m.hooks.on_end(summary);
  m.watchdog.beat("done");
  return summary;
}

EvalResult Trainer::evaluate() {
  return detail::evaluate(impl_->ctx, impl_->test, impl_->micro, impl_->loader_options());
}

void Trainer::set_validation(std::shared_ptr<const Dataset> val) { impl_->val = std::move(val); }

Model& Trainer::model() { return *impl_->model; }
const Config& Trainer::config() const { return impl_->cfg; }

}  // namespace dtrain
