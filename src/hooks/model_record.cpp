#include "hooks/model_record.h"

#include <algorithm>

#include "util/dir.h"
#include "util/fs.h"

namespace dtrain::detail {

void put_evaluation(nlohmann::ordered_json& j, const EvalResult& r, bool classify) {
  j["test_count"] = r.count;
  j["test_loss"] = r.loss;
  if (classify) j["test_accuracy"] = r.accuracy;
  if (r.top5) j["test_top5_accuracy"] = *r.top5;
}

std::string model_record(const TrainSummary& s, const RunInfo& run) {
  const int64_t per_epoch = std::max<int64_t>(1, run.steps_per_epoch);
  nlohmann::ordered_json j{{"weights", "model.pt"},
                           {"step", s.steps},
                           {"epoch", s.steps > 0 ? (s.steps - 1) / per_epoch + 1 : 0},
                           {"steps_per_epoch", run.steps_per_epoch},
                           {"total_steps", s.total_steps},
                           {"ended", s.stopped ? "early stop" : "completed"}};
  if (s.stopped) j["stop_reason"] = s.stop_reason, j["stopped_by_rank"] = s.stopped_by;
  // train.ema_decay: whose weights model.pt holds (train.ema_output).
  if (run.config && run.config->train.ema_decay > 0)
    j["weights_of"] = run.config->train.ema_output ? "ema" : "model";
  j["evaluation"] = nullptr;
  if (s.eval.count > 0 && s.eval_step == s.steps) {
    nlohmann::ordered_json e{{"step", s.eval_step}};
    put_evaluation(e, s.eval, run.data.num_classes > 0);
    j["evaluation"] = e;
  }
  j["checkpoint"] = nullptr;
  if (!s.checkpoint.empty() && s.checkpoint_step == s.steps) j["checkpoint"] = s.checkpoint;
  return j.dump(2) + "\n";
}

int64_t recorded_step(const std::string& path) {
  if (!path_exists(path)) return -1;
  try {
    const auto j = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
      return j["step"].get<int64_t>();
  } catch (const std::exception&) {
    // unreadable: not known
  }
  return -1;
}

}  // namespace dtrain::detail
