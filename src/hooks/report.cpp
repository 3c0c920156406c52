// The end-of-run report on rank 0: steps, samples and rate; where rank 0's time went (data wait,
// compute, communication not hidden behind backward, optimizer); peak GPU memory; recoveries
// and skipped steps; an early stop; the final evaluation (or the last one, named by its step,
// when it is not of the last step's model); then the diagnosis in plain words
// (telemetry/diagnosis.h: each finding with its numbers and the fix). With a run directory,
// rank 0 also writes the same text to report.txt and the page report.html
// (telemetry/report_html.h: the charts of the records that read the loss, the findings, the
// run's facts). A resumed run's charts start with the earlier processes' records from
// metrics.jsonl (telemetry/report_history.h); its counts and rates are this process's: the
// steady rate (after the warm-up) and the overall one, each named. Every rank takes part in one
// gather of the host names at the start, so that the slowest rank is named with its host.
// report.txt ends with the scaling forecast (telemetry/forecast.h, Note [scaling forecast]): the
// step and its efficiency on 2 to 64 GPUs over NVLink and InfiniBand, from rank 0's phases and
// its mean bucket timeline over the steps; a CUDA run's log says it in one line.
#include <algorithm>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cuda/memory.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "hooks/figures.h"
#include "hooks/standard.h"
#include "runtime/cpu_binding.h"
#include "telemetry/diagnosis.h"
#include "telemetry/forecast.h"
#include "telemetry/report_history.h"
#include "telemetry/report_html.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

std::string utc_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  char buf[40];
  if (gmtime_r(&t, &tm) == nullptr ||
      std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
    return format("%.0f (Unix time)", unix_seconds);
  return buf;
}

class Report : public Hook {
 public:
  std::string name() const override { return "report"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    run_ = run;
    hosts_ = {process_host()};
    if (run.control && run.world > 1) hosts_ = gather_strings(*run.control, process_host());
    if (run.rank != 0 || run.run_dir.empty() || run.resumed_from.empty()) return;
    // The charts span the whole run: the earlier processes' records first.
    const std::string metrics = join_path(run.run_dir, "metrics.jsonl");
    const int64_t bad =
        add_earlier_records(metrics, run.resumed_step, run.data.num_classes > 0, series_);
    if (bad > 0)
      log::warn(metrics + ": " + std::to_string(bad) +
                " line(s) are not JSON records (a process ended mid-write?); the report leaves "
                "them out");
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (run_.rank != 0) return;
    // The bucket timelines past the first steps (the plan is rebuilt after the first).
    if (r.buckets && !r.buckets->empty() && r.step > run_.resumed_step + 2)
      timeline_.add(*r.buckets, r.backward_end);
    if (!r.loss) return;
    ReportPoint p;
    p.step = r.step, p.epoch = r.epoch, p.time = r.elapsed, p.loss = *r.loss;
    p.samples_per_s = r.samples_per_s;
    if (r.gpu && r.gpu->samples > 0) p.gpu_util = r.gpu->utilization;
    p.phases = r.window_phases;
    series_.add(p);
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    if (run_.rank != 0) return;
    EvalPoint e;
    e.step = r.step, e.epoch = r.epoch, e.loss = r.result.loss;
    if (run_.data.num_classes > 0) e.accuracy = r.result.accuracy;
    series_.add_eval(e);
  }

  void on_end(TrainSummary& s) override {
    if (run_.rank != 0) return;
    const std::vector<std::string> lines = summary_lines(s);
    // A signal's stop (a pause: the run resumes) says where it stands in one line; the rest of the
    // summary and the diagnosis go to report.txt.
    const bool paused = s.stop_signal != 0;
    for (const std::string& line : lines) {
      log::info(line);
      if (paused) break;
    }
    const std::vector<Finding> findings = diagnose(diagnosis_input(s));
    const std::string diagnosis = diagnosis_text(findings);
    if (!run_.run_dir.empty() && !paused) log::detail("run directory: " + run_.run_dir);
    if (!paused) log::info(diagnosis.substr(0, diagnosis.size() - 1));
    // On a GPU, one line of the forecast (a CPU's compute says little of a GPU's); not for a
    // stop, which says only what it must.
    if (run_.device.is_cuda() && !paused && steps_run(s) > 0)
      log::detail(forecast_line(forecast(scaling_input(s), link_presets())));
    if (run_.run_dir.empty()) return;
    std::string text = "dtrain report: " + run_.config->run.name + "\n";
    for (const std::string& line : lines) text += line + "\n";
    text += "run directory: " + run_.run_dir + "\n";
    std::string scaling;
    for (const std::string& line : forecast_lines(s)) scaling += line + "\n";
    write_file_atomic(join_path(run_.run_dir, "report.txt"), text + diagnosis + scaling);
    const std::string title = "dtrain report: " + run_.config->run.name;
    write_file_atomic(join_path(run_.run_dir, "report.html"),
                      report_html(report_data(title, facts(s), findings, series_)));
    log::detail("report: " + join_path(run_.run_dir, "report.txt") + ", report.html" +
                (paused ? " (the summary and the diagnosis so far)" : ""));
  }

 private:
  // "12.0 MiB (its shard of 4: dist.shard_optimizer)"
  static std::string sharded_state(const TrainSummary& s) {
    return format("%.1f MiB (its shard of %d: dist.shard_optimizer)",
                  static_cast<double>(s.optimizer_state_bytes) / (1 << 20), s.optimizer_shards);
  }

  std::vector<std::string> summary_lines(const TrainSummary& s) const {
    std::vector<std::string> out;
    const PhaseTimes& p = s.phases;
    const double total = std::max(1e-9, p.total());
    std::string done = format("done: %lld steps", static_cast<long long>(s.steps));
    if (run_.resumed_step > 0)
      done += format(" (%lld in this process, resumed at step %lld)",
                     static_cast<long long>(s.steps - run_.resumed_step),
                     static_cast<long long>(run_.resumed_step));
    out.push_back(
        done +
        format(", %lld samples in %.1f s: ", static_cast<long long>(s.run_samples), s.seconds) +
        rates(s));
    out.push_back(
        format("rank 0 time: data %.1f%%, compute %.1f%%, communication %.1f%%, "
               "optimizer %.1f%%",
               100 * p.data / total, 100 * p.compute / total, 100 * p.comm / total,
               100 * p.optimizer / total));
    if (run_.device.is_cuda())
      out.push_back("peak GPU memory " + gib(s.memory.peak) + " (allocated by tensors) on rank 0" +
                    (s.memory.decode > 0
                         ? ", and " + gib(s.memory.decode) + " held by the GPU JPEG decoders"
                         : "") +
                    (s.memory.checkpoint_pinned > 0
                         ? "; " + gib(s.memory.checkpoint_pinned) +
                               " of page-locked host memory for background checkpoint saves"
                         : ""));
    if (s.optimizer_shards > 1) out.push_back("optimizer state " + sharded_state(s) + " on rank 0");
    if (s.oom_retries > 0)
      out.push_back("out-of-memory recoveries: " + std::to_string(s.oom_retries) +
                    "; micro-batch now " + std::to_string(s.micro_batch));
    if (s.skipped_steps > 0)
      out.push_back(
          "steps skipped for non-finite gradients (fp16 loss scaling, train.skip_nonfinite): " +
          std::to_string(s.skipped_steps));
    if (s.stopped && s.stop_signal == 0)  // a signal's stop: the run's last line (exit_code)
      // The reason in the words of whoever asked (an early stop names its metric); a hook that
      // gave none is named by its rank.
      out.push_back("stopped after step " + std::to_string(s.steps) + " of " +
                    std::to_string(run_.total_steps) + ": " +
                    (s.stop_reason.empty()
                         ? "a hook on rank " + std::to_string(s.stopped_by) + " asked to stop"
                         : s.stop_reason));
    if (s.eval.count > 0)
      out.push_back(last_evaluation(s) + eval_text(s.eval, run_.data.num_classes > 0));
    return out;
  }

  // Whose the last evaluation is, before its text: "final " only when it is of the model the
  // run ends with (its last step, the run ended); else the step it is of, so that no older
  // evaluation reads as the final model's (a stop after it, a signal's pause).
  static std::string last_evaluation(const TrainSummary& s) {
    if (s.eval_step == s.steps && s.stop_signal == 0) return "final ";
    if (s.eval_step == s.steps)
      return "last evaluation, of step " + std::to_string(s.steps) +
             "'s model (in the checkpoint; the run has not ended): ";
    return "last evaluation, of step " + std::to_string(s.eval_step) +
           "'s model (not the last step's, " + std::to_string(s.steps) +
           ", which none evaluated): ";
  }

  // This process's rates, each named: the steady one (after the warm-up and the capture) and
  // the overall one (start-up included).
  static std::string rates(const TrainSummary& s) {
    const double overall = s.seconds > 0 ? static_cast<double>(s.run_samples) / s.seconds : 0.0;
    if (s.steady_from_step < 0)
      return format("%.0f samples/s overall (too few steps for a steady rate)", overall);
    return format(
        "%.0f samples/s steady (from step %lld), %.0f samples/s overall (start-up and "
        "warm-up included)",
        s.steady_samples_per_s, static_cast<long long>(s.steady_from_step), overall);
  }

  DiagnosisInput diagnosis_input(const TrainSummary& s) const {
    const Config& c = *run_.config;
    DiagnosisInput in;
    in.on_cuda = run_.device.is_cuda();
    in.world = run_.world;
    in.steps = s.steps - run_.resumed_step;  // this run's steps: the phase times are this run's
    in.phases = s.phases;
    in.rank_phases = s.rank_phases;
    in.rank_hosts = hosts_;
    in.workers = c.data.workers, in.prefetch = c.data.prefetch, in.pin_memory = c.data.pin_memory;
    if (const auto b = detail::recorded_cpu_binding()) {
      in.rank_cpus = b->rank_cpus, in.idle_cpus = detail::idle_cpus(*b);
      in.sharing_ranks = b->sharing;
      in.binding_fix = detail::binding_fix(*b);
    }
    in.buckets = s.buckets, in.backward_end = s.backward_end;
    in.bucket_cap_mb = c.dist.bucket_cap_mb, in.first_bucket_mb = c.dist.first_bucket_mb;
    in.overlap = c.dist.overlap;
    in.grad_dtype = to_string(c.dist.grad_dtype);
    // The run's NVML mean judges the GPU's busy share only with 3 samples past the start-up:
    // a shorter run (a bench setting) would be judged by the samples of its warm-up.
    if (s.gpu && s.gpu->steady && s.gpu->samples >= 3) in.gpu_busy_percent = s.gpu->utilization;
    in.step_mode = s.step_mode;
    in.cuda_graph = to_string(c.train.cuda_graph);
    in.parameters = run_.parameters;
    in.first_micro_batch = run_.micro_batch, in.micro_batch = s.micro_batch;
    in.rank_batch = c.resolved.rank_batch;
    if (in.on_cuda)
      in.memory_peak = s.memory.peak, in.memory_total = memory_stats(run_.device).total;
    in.weight_bytes = s.weight_bytes, in.gradient_bytes = s.gradient_bytes;
    in.optimizer_state_bytes = s.optimizer_state_bytes, in.optimizer_shards = s.optimizer_shards;
    in.oom_retries = s.oom_retries, in.skipped_steps = s.skipped_steps;
    in.precision = to_string(c.train.precision);
    return in;
  }

  int64_t steps_run(const TrainSummary& s) const { return s.steps - run_.resumed_step; }

  // What the forecast takes from this run (Note [scaling forecast]): rank 0's phases per step of
  // this process, its mean bucket timeline (else the last step's), the gradients' collective.
  ScalingInput scaling_input(const TrainSummary& s) const {
    const Config& c = *run_.config;
    ScalingInput in;
    const double steps = static_cast<double>(std::max<int64_t>(1, steps_run(s)));
    in.world = run_.world;
    in.step = s.phases.total() / steps;
    in.comm = s.phases.comm / steps;
    in.batch = c.resolved.rank_batch;
    in.buckets = timeline_.buckets(), in.backward_end = timeline_.backward_end();
    if (in.buckets.empty()) in.buckets = s.buckets, in.backward_end = s.backward_end;
    in.on_cuda = run_.device.is_cuda();
    const bool sharded = c.dist.shard_optimizer != ShardOptimizer::kOff;
    in.gradients = sharded ? Collective::kReduceScatter : Collective::kAllReduce;
    // Without a timeline: the gradients as sent (bf16 halves fp32's).
    in.gradient_bytes =
        c.dist.grad_dtype == GradDtype::kBf16 ? s.gradient_bytes / 2 : s.gradient_bytes;
    if (sharded) in.broadcast_bytes = s.weight_bytes;
    return in;
  }

  std::vector<std::string> forecast_lines(const TrainSummary& s) const {
    if (steps_run(s) <= 0) return {};
    const ScalingInput in = scaling_input(s);
    const std::vector<Link>& links = link_presets();
    std::string source = "rank 0's " + std::to_string(steps_run(s)) + " steps";
    if (timeline_.steps() > 0)
      source += " (bucket timeline: the mean of " + std::to_string(timeline_.steps()) + ")";
    if (!run_.device.is_cuda())
      source += ", on a CPU: what these links would add to this CPU's step, not a GPU's speed";
    return forecast_text(in, forecast(in, links), links, source);
  }

  Facts facts(const TrainSummary& s) const {
    const Config& c = *run_.config;
    const std::set<std::string> hosts(hosts_.begin(), hosts_.end());
    std::string on;
    for (const std::string& h : hosts) on += (on.empty() ? "" : ", ") + h;
    Facts f;
    f.push_back({"run", c.run.name + " (" + run_.run_dir + ")"});
    f.push_back({"started", utc_time(s.wall_start)});
    f.push_back({"world", std::to_string(run_.world) + " rank(s) on " + on});
    f.push_back({"device", run_.device_name.empty() ? run_.device.str() : run_.device_name});
    f.push_back({"model", c.model.name + ", " + std::to_string(run_.parameters) + " parameters"});
    f.push_back(
        {"data",
         std::to_string(run_.train_samples) + " training samples" +
             (run_.test_samples > 0 ? ", " + std::to_string(run_.test_samples) + " test" : "")});
    f.push_back({"global batch", std::to_string(c.train.global_batch) + " (" +
                                     std::to_string(c.resolved.rank_batch) +
                                     " per rank, micro-batch " + std::to_string(s.micro_batch) +
                                     ")"});
    f.push_back({"precision", to_string(c.train.precision)});
    f.push_back({"steps", std::to_string(s.steps) + " of " + std::to_string(run_.total_steps) +
                              (run_.resumed_step > 0
                                   ? " (resumed at " + std::to_string(run_.resumed_step) + ")"
                                   : "")});
    f.push_back({"training time", format("%.1f s for %lld samples in this process", s.seconds,
                                         static_cast<long long>(s.run_samples))});
    f.push_back({"throughput", rates(s)});
    const PhaseTimes& p = s.phases;
    const double total = std::max(1e-9, p.total());
    f.push_back(
        {"time split (rank 0)",
         format("data %.1f%%, compute %.1f%%, comm %.1f%%, optimizer %.1f%%", 100 * p.data / total,
                100 * p.compute / total, 100 * p.comm / total, 100 * p.optimizer / total)});
    f.push_back({"step mode", s.step_mode.empty() ? std::string("eager") : s.step_mode});
    if (run_.device.is_cuda()) f.push_back({"peak GPU memory", gib(s.memory.peak) + " on rank 0"});
    if (s.optimizer_shards > 1) f.push_back({"optimizer state", sharded_state(s) + " on rank 0"});
    if (s.eval.count > 0)
      f.push_back({s.eval_step == s.steps && s.stop_signal == 0
                       ? std::string("final test")
                       : "test (step " + std::to_string(s.eval_step) + ")",
                   run_.data.num_classes > 0
                       ? format("accuracy %.2f%%, loss %.4f", 100.0 * s.eval.accuracy, s.eval.loss)
                       : format("loss %.6f", s.eval.loss)});
    return f;
  }

  RunInfo run_;
  std::vector<std::string> hosts_;
  TimelineMean timeline_;
  ReportSeries series_;
};

}  // namespace

std::shared_ptr<Hook> make_report() { return std::make_shared<Report>(); }

}  // namespace dtrain::detail
