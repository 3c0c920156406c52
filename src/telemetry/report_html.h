// report.html: one self-contained page per run (no network: inline CSS, inline JS drawing SVG)
// with the charts of the training loss (and the evaluations), throughput, GPU utilization and
// the phase split over time, the diagnosis and the run's facts. The data sits in the page as
// one JSON object, <script type="application/json" id="data">, so that tools read it back:
//   {"title", "facts": [[label, value], ...], "findings": [{"kind", "what", "fix"}, ...],
//    "train": {"step", "epoch", "time", "loss", "samples_per_s", "gpu_util",
//              "phases": {"data", "compute", "comm", "optimizer"}},  // columns, one per record
//    "eval": {"step", "epoch", "loss", "accuracy"}, "stride", "records"}
// `train` holds the records that read the loss (those of metrics.jsonl's "train" lines), every
// `stride`-th of `records` once there are more than the cap (the run's last one always).
// Plain data, no LibTorch (tests/unit/test_report_html.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/records.h"
#include "telemetry/diagnosis.h"

namespace dtrain::detail {

// One record that read the loss.
struct ReportPoint {
  int64_t step = 0, epoch = 0;
  double time = 0;  // seconds since training began
  double loss = 0;
  double samples_per_s = 0;
  std::optional<double> gpu_util;  // percent (NVML)
  PhaseTimes phases;               // the window's (since the previous record), this rank
};

struct EvalPoint {
  int64_t step = 0, epoch = 0;
  double loss = 0;
  std::optional<double> accuracy;  // classification only
};

// The series of a run, in bounded memory: at most `cap` points; past it every other point is
// dropped and only every `stride`-th record kept (stride doubles each time), the last one kept.
class ReportSeries {
 public:
  explicit ReportSeries(size_t cap = 10000);
  void add(const ReportPoint& p);
  void add_eval(const EvalPoint& e);
  // The points kept, the run's last record included.
  std::vector<ReportPoint> points() const;
  const std::vector<EvalPoint>& evals() const { return evals_; }
  int64_t stride() const { return stride_; }
  int64_t records() const { return records_; }

 private:
  size_t cap_;
  std::vector<ReportPoint> points_;
  std::optional<ReportPoint> last_;  // the latest record when it was not kept
  std::vector<EvalPoint> evals_;
  int64_t stride_ = 1, records_ = 0;
};

using Facts = std::vector<std::pair<std::string, std::string>>;

// The page's JSON object (above).
nlohmann::json report_data(const std::string& title, const Facts& facts,
                           const std::vector<Finding>& findings, const ReportSeries& series);
// The page, with report_data() embedded.
std::string report_html(const nlohmann::json& data);

}  // namespace dtrain::detail
