// Figures derived from a record and the run, shared by the writers that show where the time goes
// (metrics.jsonl, TensorBoard, the progress line), so that each shows the same number: tokens
// per second, model FLOPs utilization (MFU) and the phases' shares of a window; and the text of an
// evaluation's result.
#pragma once

#include <optional>
#include <string>

#include "dtrain/hooks.h"
#include "dtrain/records.h"
#include "util/format.h"

namespace dtrain::detail {

// Tokens per second over all ranks at `samples_per_s` (global); empty for models that do not
// take token sequences.
inline std::optional<double> tokens_per_s(const RunInfo& run, double samples_per_s) {
  if (run.tokens_per_sample <= 0) return std::nullopt;
  return samples_per_s * static_cast<double>(run.tokens_per_sample);
}

// Model FLOPs utilization of each GPU at `samples_per_s` (global): the samples one rank trains
// per second, times `flops_per_sample`, over the device's dense peak FLOP/s. Empty when the
// model's FLOPs or the device's peak are unknown (0), as on CPUs.
inline std::optional<double> mfu(const RunInfo& run, double samples_per_s,
                                 double flops_per_sample) {
  if (flops_per_sample <= 0 || run.peak_flops <= 0 || run.world <= 0) return std::nullopt;
  return samples_per_s / run.world * flops_per_sample / run.peak_flops;
}

// Each training phase's share of the window's time (data + compute + comm + optimizer); all 0
// for an empty window. eval stays 0.
inline PhaseTimes phase_shares(const PhaseTimes& window) {
  PhaseTimes s;
  const double total = window.total();
  if (total <= 0) return s;
  s.data = window.data / total;
  s.compute = window.compute / total;
  s.comm = window.comm / total;
  s.optimizer = window.optimizer / total;
  return s;
}

// An evaluation as report.txt's final line and `dtrain eval` print it: "test accuracy: 88.53%,
// top-5 99.10% (loss 0.3312, 10000 samples)", or without classes "test loss: 0.012345 (1024
// samples)".
inline std::string eval_text(const EvalResult& r, bool classify) {
  if (!classify)
    return format("test loss: %.6f (%lld samples)", r.loss, static_cast<long long>(r.count));
  return format("test accuracy: %.2f%%", 100.0 * r.accuracy) +
         (r.top5 ? format(", top-5 %.2f%%", 100.0 * *r.top5) : "") +
         format(" (loss %.4f, %lld samples)", r.loss, static_cast<long long>(r.count));
}

}  // namespace dtrain::detail
