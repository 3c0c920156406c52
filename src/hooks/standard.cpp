#include "hooks/standard.h"

namespace dtrain::detail {

std::vector<std::shared_ptr<Hook>> standard_hooks(const Config& cfg, Model& model) {
  std::vector<std::shared_ptr<Hook>> hooks;
  if (cfg.run.profile_steps > 0) hooks.push_back(make_profiler_window(cfg.run));
  hooks.push_back(make_signal_stop());
  hooks.push_back(make_checkpoint_writer());
  hooks.push_back(make_metrics_file());
  if (cfg.run.tensorboard) hooks.push_back(make_tensorboard());
  hooks.push_back(make_progress());
  hooks.push_back(make_bucket_timeline());
  if (cfg.run.timeline) hooks.push_back(make_timeline());
  hooks.push_back(make_report());
  hooks.push_back(make_model_file(model));
  if (cfg.train.monitor != Monitor::kOff) hooks.push_back(make_best_model(model));
  return hooks;
}

}  // namespace dtrain::detail
