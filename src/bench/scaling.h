// `dtrain bench --forecast`: the scaling forecast (telemetry/forecast.h, Note [scaling forecast])
// of a timed setting, from its timed steps: the step's mean, the least communication phase over
// the ranks, rank 0's mean bucket timeline. Its links: --link's, else the presets and, on several
// ranks, "measured": this job's own gradient collective (NCCL's on GPUs, MPI's on CPUs) timed at
// the setting's bucket sizes, on its data communicator, and fitted to a bus bandwidth and a
// latency.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/sweep.h"
#include "dtrain/runtime.h"
#include "telemetry/forecast.h"

namespace dtrain::bench {

struct ScalingForecast {
  detail::ScalingInput input;
  std::vector<detail::Link> links;
  detail::Forecast forecast;
  // "measured": the timed collectives, (bytes per rank, seconds: the median of the repeats on
  // the slowest rank).
  std::vector<std::pair<double, double>> timed;
  std::string source;  // what the input is ("the 20 timed steps of micro-batch 64, ...")
};

// --link's texts: parsed, "measured" refused on one rank; empty: the presets, and "measured" on
// several ranks. Errors name --link.
std::vector<detail::Link> forecast_links(const std::vector<std::string>& texts, int world);

// Collective: every rank times the gradient collective at each of `bytes` (each rank's buffer,
// in `dtype`) `repeats` times after one untimed, each between a barrier and the device's end.
std::vector<std::pair<double, double>> time_collective(Runtime& rt, detail::Collective c,
                                                       const std::vector<int64_t>& bytes,
                                                       at::ScalarType dtype, int repeats = 5);

// Collective: the forecast of `row` (a setting that fits) run with `config`, over `links`, whose
// "measured" entry is timed here.
ScalingForecast forecast_setting(Runtime& rt, const Row& row, const Config& config,
                                 std::vector<detail::Link> links, const std::string& source);

// The forecast as the bench's JSON object ("forecast" in PREFIX.json).
std::string forecast_json(const ScalingForecast& f);

// --forecast-from: the measurements a JSON text holds, as forecast_json writes them (a bench's
// PREFIX.json, its "forecast" object, or that object's "from"), and what they are ("source", else
// `origin`). A missing or mistyped field is an Error naming `origin` and the field.
std::pair<detail::ScalingInput, std::string> scaling_input_from_json(const std::string& text,
                                                                     const std::string& origin);

}  // namespace dtrain::bench
