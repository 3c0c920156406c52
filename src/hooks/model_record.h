// What a model-bearing file of a run says of itself, in JSON beside it: <run dir>/model.json
// beside model.pt (model_file.cpp) and best/best.json (best_model.cpp) name the step its weights
// are of and the evaluation of that very step, with the keys `dtrain eval --json` prints for a
// weights file (test_count, test_loss, test_accuracy, test_top5_accuracy), so that the two
// compare key by key. An evaluation of another step is never written as the file's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dtrain/hooks.h"
#include "dtrain/records.h"

namespace dtrain::detail {

// test_count and test_loss; test_accuracy with classes (`classify`); test_top5_accuracy when
// the evaluation has one.
void put_evaluation(nlohmann::ordered_json& j, const EvalResult& r, bool classify);

// model.json for the weights a run ends with (`s`, at on_end; `run`, its facts):
//   {"weights": "model.pt", "step", "epoch" (1-based, of the last step), "steps_per_epoch",
//    "total_steps" (planned), "ended": "completed" | "early stop", with an early stop
//    "stop_reason" (rank 0's hook's words, "" when another rank's asked) and "stopped_by_rank",
//    "evaluation": {"step", the test_* keys} of this step, or null when none ran at it,
//    "checkpoint": the checkpoint folder of this step, or null when none was written}
std::string model_record(const TrainSummary& s, const RunInfo& run);

// The step the model.json at `path` records; -1 when there is none or it is not such a file.
int64_t recorded_step(const std::string& path);

}  // namespace dtrain::detail
