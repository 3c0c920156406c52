// The timeline (run.timeline: true, with a run directory): per rank a Chrome-trace / Perfetto
// JSON file, run_dir/timeline.rank<R>.json, and on rank 0 timeline.json, every rank's merged;
// open them in https://ui.perfetto.dev or chrome://tracing. pid = rank; tracks (tid):
//   0 "steps"       a span per step ("step", from its data wait to the end of on_step) holding
//                   its phases "data", "compute", "comm", "optimizer" (this rank's measured
//                   seconds, laid out back to back in the order they run), and an "eval" span
//                   per evaluation;
//   10 + b          "bucket b": per step, "bucket" from the moment its gradients were ready to
//                   when the wait for its all-reduce returned, holding "all-reduce" from its
//                   launch (the gradient engine's BucketTiming: several ranks, or
//                   dist.reduce_single_rank; eager steps only, a CUDA graph's replays are
//                   not timed).
// Times are microseconds from a common origin: every rank reads its steady clock as it leaves
// one barrier at the start, so that spans of different ranks line up within the barrier's exit
// skew (microseconds on one host); otherData gives rank 0's Unix time at that origin.
// Memory stays bounded: the first kStepCap steps are recorded, later ones only counted
// (otherData says how many). Files are written with the checked writers; a failure on any rank
// is an Error on every rank.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "hooks/standard.h"
#include "util/clock.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

constexpr size_t kStepCap = 10000;
constexpr int kBucketTid = 10;

using nlohmann::json;

struct StepSpans {
  int64_t step = 0, epoch = 0;
  double begin = 0, end = 0;  // us: on_step_begin (after the data wait) and on_step
  PhaseTimes phases;          // this step's seconds
  double buckets_start = -1;  // us; < 0: no buckets
  std::vector<BucketTiming> buckets;
};

json span(const std::string& name, int pid, int tid, double ts, double dur, json args) {
  return {{"name", name},
          {"ph", "X"},
          {"pid", pid},
          {"tid", tid},
          {"ts", ts},
          {"dur", std::max(0.0, dur)},
          {"args", std::move(args)}};
}

json meta(const std::string& what, int pid, int tid, json args) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

class Timeline : public Hook {
 public:
  std::string name() const override { return "timeline"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    run_ = run;
    if (run.run_dir.empty()) {
      if (run.rank == 0)
        log::warn(
            "run.timeline is on but the run writes no files (run.dir is empty): no timeline is "
            "written");
      return;
    }
    if (run.world > 1 && !run.control)
      throw Error("the timeline needs the control communicator to merge the ranks' files",
                  "run.timeline");
    active_ = true;
    // The common origin: every rank leaves the barrier at about the same moment.
    if (run.world > 1) run.control->barrier();
    origin_ = Clock::now();
    at::Tensor wall = at::tensor({unix_now()}, at::kDouble);
    if (run.world > 1) run.control->broadcast(wall, 0);
    origin_unix_ = wall.item<double>();
  }

  void on_step_begin(int64_t) override {
    if (active_) begin_ = now_us();
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!active_) return;
    const double end = now_us();
    PhaseTimes d;
    d.data = r.phases.data - last_.data, d.compute = r.phases.compute - last_.compute;
    d.comm = r.phases.comm - last_.comm, d.optimizer = r.phases.optimizer - last_.optimizer;
    last_.data = r.phases.data, last_.compute = r.phases.compute;
    last_.comm = r.phases.comm, last_.optimizer = r.phases.optimizer;
    if (eval_end_ >= 0) {
      // An evaluation ran before this step: it ended at eval_end_ and lasted the eval delta.
      add_eval(r.phases.eval - last_.eval);
      last_.eval = r.phases.eval;
    }
    if (steps_.size() >= kStepCap) {
      ++dropped_;
      return;
    }
    StepSpans s;
    s.step = r.step, s.epoch = r.epoch, s.begin = begin_, s.end = end, s.phases = d;
    if (r.buckets && !r.buckets->empty()) {
      const double start = (r.buckets_start - seconds_of(origin_)) * 1e6;
      // This step's buckets only: their origin lies within the step.
      if (start >= begin_ && start <= end) s.buckets_start = start, s.buckets = *r.buckets;
    }
    steps_.push_back(std::move(s));
  }

  void on_eval(const EvalRecord&, LoopControl&) override {
    if (active_) eval_end_ = now_us();
  }

  void on_end(TrainSummary& summary) override {
    if (!active_) return;
    if (eval_end_ >= 0) add_eval(summary.phases.eval - last_.eval);
    const json mine = trace();
    const std::string path =
        join_path(run_.run_dir, "timeline.rank" + std::to_string(run_.rank) + ".json");
    std::string failure;
    try {
      make_dirs(run_.run_dir);  // other nodes' ranks may not have it yet
      write_file_atomic(path, mine.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
    if (run_.world > 1)
      agree_no_failure(*run_.control, failure, "writing the timeline");
    else if (!failure.empty())
      throw Error(failure);
    std::vector<std::string> all = {mine.dump(-1, ' ', false, json::error_handler_t::replace)};
    if (run_.world > 1) all = gather_strings(*run_.control, all.front());
    if (run_.rank != 0) return;
    json merged = {{"traceEvents", json::array()}, {"displayTimeUnit", "ms"}};
    json ranks = json::array();
    for (const std::string& text : all) {
      json one = json::parse(text);
      for (auto& e : one["traceEvents"]) merged["traceEvents"].push_back(std::move(e));
      ranks.push_back(one["otherData"]);
    }
    merged["otherData"] = {{"world", run_.world}, {"ranks", ranks}};
    const std::string merged_path = join_path(run_.run_dir, "timeline.json");
    write_file_atomic(merged_path,
                      merged.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    log::detail("timeline: " + merged_path + " (" + std::to_string(steps_.size()) +
                " steps per rank; open it in https://ui.perfetto.dev)");
  }

 private:
  static double seconds_of(Clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  }
  double now_us() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
  }

  void add_eval(double seconds) {
    if (evals_.size() < kStepCap) evals_.push_back({eval_end_ - seconds * 1e6, seconds * 1e6});
    eval_end_ = -1;
  }

  json trace() const {
    const int pid = run_.rank;
    json ev = json::array();
    ev.push_back(meta("process_name", pid, 0,
                      {{"name", "rank " + std::to_string(pid) + " (" + process_host() + ")"}}));
    ev.push_back(meta("process_sort_index", pid, 0, {{"sort_index", pid}}));
    ev.push_back(meta("thread_name", pid, 0, {{"name", "steps"}}));
    size_t buckets = 0;
    for (const StepSpans& s : steps_) buckets = std::max(buckets, s.buckets.size());
    for (size_t b = 0; b < buckets; ++b)
      ev.push_back(meta("thread_name", pid, kBucketTid + static_cast<int>(b),
                        {{"name", "bucket " + std::to_string(b)}}));
    for (const StepSpans& s : steps_) {
      const json args = {{"step", s.step}, {"epoch", s.epoch}};
      const double start = s.begin - s.phases.data * 1e6;
      ev.push_back(span("step", pid, 0, start, s.end - start, args));
      double t = start;
      const std::pair<const char*, double> phases[] = {{"data", s.phases.data},
                                                       {"compute", s.phases.compute},
                                                       {"comm", s.phases.comm},
                                                       {"optimizer", s.phases.optimizer}};
      for (const auto& [phase, seconds] : phases) {
        if (seconds <= 0) continue;
        const double dur = std::min(seconds * 1e6, s.end - t);
        ev.push_back(span(phase, pid, 0, t, dur, args));
        t += dur;
      }
      for (const BucketTiming& b : s.buckets) {
        const int tid = kBucketTid + b.bucket;
        const double ready = s.buckets_start + b.ready * 1e6,
                     launched = s.buckets_start + b.launched * 1e6;
        const double done = s.buckets_start + b.done * 1e6;
        json bargs = {{"step", s.step},
                      {"bucket", b.bucket},
                      {"bytes", b.bytes},
                      {"ready_ms", b.ready * 1e3},
                      {"launched_ms", b.launched * 1e3},
                      {"done_ms", b.done * 1e3}};
        ev.push_back(span("bucket", pid, tid, ready, done - ready, bargs));
        ev.push_back(span("all-reduce", pid, tid, launched, done - launched, std::move(bargs)));
      }
    }
    for (const auto& [ts, dur] : evals_)
      ev.push_back(span("eval", pid, 0, ts, dur, json::object()));
    json other = {
        {"rank", run_.rank},
        {"host", process_host()},
        {"world", run_.world},
        {"origin_unix_time", origin_unix_},
        {"clock",
         "microseconds since every rank left one barrier at the start (host steady clock)"},
        {"steps_recorded", steps_.size()},
        {"steps_not_recorded", dropped_},
        {"step_cap", kStepCap},
        {"phases",
         "this rank's measured seconds of each phase, laid out back to back in the "
         "order they run from the step's start (the data wait ends as the step begins)"}};
    return {
        {"traceEvents", std::move(ev)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
  }

  RunInfo run_;
  bool active_ = false;
  Clock::time_point origin_;
  double origin_unix_ = 0;
  double begin_ = 0;
  double eval_end_ = -1;
  PhaseTimes last_;
  std::vector<StepSpans> steps_;
  std::vector<std::pair<double, double>> evals_;  // ts, dur (us)
  int64_t dropped_ = 0;
};

}  // namespace

std::shared_ptr<Hook> make_timeline() { return std::make_shared<Timeline>(); }

}  // namespace dtrain::detail
