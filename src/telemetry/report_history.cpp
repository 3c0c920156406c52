#include "telemetry/report_history.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "dtrain/error.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

// One line of metrics.jsonl as an object, or nothing when it is not one.
std::optional<nlohmann::json> parse_record(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("step") ||
      !j["step"].is_number_integer())
    return std::nullopt;
  return j;
}

double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::ifstream open_records(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the run's earlier metrics records", path);
  return in;
}

}  // namespace

int64_t add_earlier_records(const std::string& metrics_path, int64_t resumed_step,
                            bool classification, ReportSeries& series) {
  if (!path_exists(metrics_path)) return 0;
  // First pass: the step of each resume record, by line. A record stands when its step is at
  // most every later resume's step (and the step this run resumed from).
  std::vector<int64_t> resume_at;  // per line: the step of a resume record there, else max
  int64_t bad = 0;
  {
    std::ifstream in = open_records(metrics_path);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = parse_record(line);
      resume_at.push_back(j && (*j)["type"] == "resume" ? (*j)["step"].get<int64_t>()
                                                        : std::numeric_limits<int64_t>::max());
      if (!j) ++bad;
    }
    if (in.bad()) throw Error("reading the run's earlier metrics records failed", metrics_path);
  }
  std::vector<int64_t> bound(resume_at.size() + 1, resumed_step);  // min over later resumes
  for (size_t i = resume_at.size(); i-- > 0;) bound[i] = std::min(bound[i + 1], resume_at[i]);
  std::ifstream in = open_records(metrics_path);
  std::string line;
  for (size_t i = 0; i < resume_at.size() && std::getline(in, line); ++i) {
    const auto j = parse_record(line);
    if (!j || (*j)["step"].get<int64_t>() > bound[i + 1]) continue;
    const nlohmann::json& r = *j;
    if (r["type"] == "train" && r.contains("loss")) {
      ReportPoint p;
      p.step = r["step"].get<int64_t>();
      p.epoch = static_cast<int64_t>(number(r, "epoch"));
      p.time = number(r, "elapsed_s");
      p.loss = number(r, "loss");
      p.samples_per_s = number(r, "samples_per_s");
      if (r.contains("gpu_util")) p.gpu_util = number(r, "gpu_util");
      p.phases.data = number(r, "window_data_s");
      p.phases.compute = number(r, "window_compute_s");
      p.phases.comm = number(r, "window_comm_s");
      p.phases.optimizer = number(r, "window_optimizer_s");
      series.add(p);
    } else if (r["type"] == "eval") {
      EvalPoint e;
      e.step = r["step"].get<int64_t>();
      e.epoch = static_cast<int64_t>(number(r, "epoch"));
      e.loss = number(r, "test_loss");
      if (classification) e.accuracy = number(r, "test_accuracy");
      series.add_eval(e);
    }
  }
  return bad;
}

}  // namespace dtrain::detail
