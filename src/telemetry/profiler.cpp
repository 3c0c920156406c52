#include "telemetry/profiler.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "dtrain/error.h"
#include "dtrain/log.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

namespace kp = torch::autograd::profiler;
namespace pi = torch::profiler::impl;

constexpr const char* kStepName = "dtrain_step";

// A kernel's name without its template arguments and parameter list, at most 90 characters.
std::string short_name(const std::string& name) {
  std::string s;
  int depth = 0;
  for (char c : name) {
    if (c == '<' || c == '(') ++depth;
    if (depth == 0) s += c;
    if ((c == '>' || c == ')') && depth > 0) --depth;
  }
  if (s.empty()) s = name;
  if (s.size() > 90) s = s.substr(0, 87) + "...";
  return s;
}

}  // namespace

struct StepProfiler::Scope {
  explicit Scope(int64_t step) : guard(at::RecordScope::USER_SCOPE) {
    (void)step;
    if (guard.isActive()) guard.before(kStepName);
  }
  at::RecordFunction guard;
};

std::string profiler_trace_problem() {
  // A LibTorch built without Kineto records but cannot write a trace: a window of no steps,
  // saved to a file of its own, finds out. Once per process.
  static const std::string problem = [] {
    pi::ProfilerConfig config(pi::ProfilerState::KINETO);
    const std::set<pi::ActivityType> activities{pi::ActivityType::CPU};
    char probe[] = "/tmp/dtrain-profiler-probe.XXXXXX";
    const int fd = mkstemp(probe);
    if (fd >= 0) close(fd);
    std::string why;
    try {
      kp::prepareProfiler(config, activities);
      kp::enableProfiler(config, activities);
      std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
      if (!result)
        why = "the profiler returned no result";
      else if (fd >= 0)
        result->save(probe);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      why = what.substr(0, what.find('\n'));
    }
    if (fd >= 0) std::remove(probe);
    return why;
  }();
  return problem;
}

StepProfiler::StepProfiler(int64_t start, int64_t steps, std::string path, bool cuda)
    : start_(start), steps_(steps), path_(std::move(path)), cuda_(cuda) {
  if (steps_ <= 0) return;
  const std::string problem = profiler_trace_problem();
  if (!problem.empty())
    throw Error("this LibTorch cannot write profiler traces (" + problem +
                    "); profile with a LibTorch built with Kineto, such as the CUDA builds",
                "run.profile_steps");
}

StepProfiler::~StepProfiler() {
  try {
    stop();
  } catch (const std::exception& e) {
    log::warn(std::string("profiler: ") + e.what());
  }
}

void StepProfiler::begin_step(int64_t step) {
  if (done_ || steps_ <= 0) return;
  if (!active_ && step == start_) {
    pi::ProfilerConfig config(pi::ProfilerState::KINETO);
    std::set<pi::ActivityType> activities{pi::ActivityType::CPU};
    if (cuda_) activities.insert(pi::ActivityType::CUDA);
    kp::prepareProfiler(config, activities);
    kp::enableProfiler(config, activities);
    active_ = true;
  }
  if (active_) scope_ = std::make_unique<Scope>(step);
}

bool StepProfiler::end_step(int64_t step) {
  if (!active_) return false;
  scope_.reset();
  return step + 1 >= start_ + steps_;
}

bool StepProfiler::stop() {
  if (!active_) return false;
  scope_.reset();
  active_ = false;
  done_ = true;
  std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  if (!result) throw Error("the profiler returned no result", "run.profile_steps");
  result->save(path_);
  // The profiler's writer reports no errors of its own: a trace that is not there, or that does
  // not end like a whole JSON document (a full disk cuts it short), is an Error naming the file.
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) throw Error("the profiler could not write its trace", path_);
  const std::streamoff size = in.tellg();
  std::string tail(static_cast<size_t>(std::min<std::streamoff>(size, 64)), '\0');
  in.seekg(size - static_cast<std::streamoff>(tail.size()));
  in.read(&tail[0], static_cast<std::streamsize>(tail.size()));
  const size_t last = tail.find_last_not_of(" \t\r\n");
  if (!in || last == std::string::npos || (tail[last] != '}' && tail[last] != ']'))
    throw Error(
        "the profiler wrote an incomplete trace (" + std::to_string(size) + " bytes; disk full?)",
        path_);
  return true;
}

ProfileSummary summarize_trace(const std::string& path, int top) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the trace", path);
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(std::string("not a Chrome trace: ") + e.what(), path);
  }
  const nlohmann::json& events =
      trace.is_object() && trace.contains("traceEvents") ? trace["traceEvents"] : trace;
  struct Span {
    double begin, end;
  };
  std::vector<Span> steps, gpu;
  struct Kernel {
    double ms = 0;
    int64_t count = 0;
  };
  std::map<std::string, Kernel> kernels;
  std::vector<std::pair<double, std::string>> kernel_events;  // start, name (for the window)
  std::vector<std::pair<Span, std::string>> gpu_named;
  std::vector<double> syncs;
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("ts")) continue;
    const std::string cat = e.value("cat", "");
    const std::string name = e.value("name", "");
    const double ts = e["ts"].get<double>();
    const double dur = e.contains("dur") ? e["dur"].get<double>() : 0.0;
    if (cat == "user_annotation" && name == kStepName) {
      steps.push_back({ts, ts + dur});
    } else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      gpu.push_back({ts, ts + dur});
      gpu_named.push_back({{ts, ts + dur}, cat == "kernel" ? name : "[" + cat + "] " + name});
    } else if ((cat == "cuda_runtime" || cat == "cuda_driver") &&
               name.find("Synchronize") != std::string::npos) {
      syncs.push_back(ts);
    }
  }
  ProfileSummary s;
  s.steps = static_cast<int64_t>(steps.size());
  if (steps.empty()) {
    s.table = "no \"dtrain_step\" ranges in the trace";
    return s;
  }
  double w0 = steps[0].begin, w1 = steps[0].end;
  for (const auto& st : steps) w0 = std::min(w0, st.begin), w1 = std::max(w1, st.end);
  // GPU work launched inside the window may run after it ends: count what starts before the
  // last step ends, and measure busy time over [w0, max(w1, last GPU end)].
  double g1 = w1;
  std::vector<Span> in_window;
  int64_t n_kernels = 0;
  double kernel_us = 0;
  for (const auto& [span, name] : gpu_named) {
    if (span.begin < w0 || span.begin > w1) continue;
    in_window.push_back(span);
    g1 = std::max(g1, span.end);
    auto& k = kernels[short_name(name)];
    k.ms += (span.end - span.begin) / 1e3;
    ++k.count;
    if (name.rfind("[", 0) != 0) ++n_kernels, kernel_us += span.end - span.begin;
  }
  std::sort(in_window.begin(), in_window.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  double busy = 0, cur_b = -1, cur_e = -1;
  for (const auto& sp : in_window) {
    if (sp.begin > cur_e) {
      if (cur_e > cur_b) busy += cur_e - cur_b;
      cur_b = sp.begin;
      cur_e = sp.end;
    } else {
      cur_e = std::max(cur_e, sp.end);
    }
  }
  if (cur_e > cur_b) busy += cur_e - cur_b;
  const double n = static_cast<double>(s.steps);
  const double span_us = std::max(w1, g1) - w0;
  s.wall_ms_per_step = span_us / 1e3 / n;
  s.gpu_busy = span_us > 0 ? busy / span_us : 0;
  s.kernel_ms_per_step = kernel_us / 1e3 / n;
  s.kernels_per_step = static_cast<double>(n_kernels) / n;
  s.syncs_per_step =
      static_cast<double>(
          std::count_if(syncs.begin(), syncs.end(), [&](double t) { return t >= w0 && t <= w1; })) /
      n;
  std::string t;
  t += "profile of " + std::to_string(s.steps) + " step(s): " + format("%.2f", s.wall_ms_per_step) +
       " ms/step, GPU busy " + format("%.1f%%", 100 * s.gpu_busy) + ", kernels " +
       format("%.2f", s.kernel_ms_per_step) + " ms/step in " + format("%.0f", s.kernels_per_step) +
       " launches, host synchronizations " + format("%.1f", s.syncs_per_step) + "/step\n";
  if (!kernels.empty()) {
    std::vector<std::pair<std::string, Kernel>> sorted(kernels.begin(), kernels.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total_ms = 0;
    for (const auto& k : sorted) total_ms += k.second.ms;
    t += "   ms/step  share  calls/step  kernel\n";
    for (int i = 0; i < top && i < static_cast<int>(sorted.size()); ++i) {
      const auto& [name, k] = sorted[static_cast<size_t>(i)];
      t += format("%10.3f", k.ms / n) +
           format("%6.1f%%", total_ms > 0 ? 100 * k.ms / total_ms : 0.0) +
           format("%12.1f", static_cast<double>(k.count) / n) + "  " + name + "\n";
    }
  }
  s.table = t;
  return s;
}

}  // namespace dtrain::detail
