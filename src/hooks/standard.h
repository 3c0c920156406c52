// The standard hooks: what every Trainer starts with, in this order (Trainer's constructor;
// tests/unit/test_tree.cpp holds this list to standard.cpp's):
//   profiler window  run.profile_steps > 0: a Chrome trace per rank and a summary
//   signal stop      a stop signal on any rank: save and stop on every rank at one boundary
//   checkpoint writer  every rank: writes checkpoint.dir/step-<N>/ on every save the loop asks
//                    for, in the background with checkpoint.async
//   metrics file     rank 0 with a run directory: config.yaml and metrics.jsonl
//   tensorboard      rank 0 with a run directory, run.tensorboard: TensorBoard event files
//   progress         rank 0: the plan, a live line on a terminal or a timestamped line every
//                    run.log_every steps (run.progress), and a line after each evaluation
//   bucket timeline  rank 0, at the end: the gradient engine's last step, bucket by bucket
//   timeline         run.timeline: every rank's steps and buckets as a Chrome trace, merged on
//                    rank 0
//   report           rank 0, at the end: rates, where the time went, memory, the final result,
//                    the diagnosis; report.txt and report.html with a run directory
//   model file       rank 0 with a run directory, at the end: model.pt, the weights for Python,
//                    with preprocess.json and model.json (its step and evaluation) beside it
//   best model       train.monitor, rank 0: the best evaluation so far (best/ with
//                    checkpoint.keep_best) and early stopping (train.early_stop_patience)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/models.h"

namespace dtrain::detail {

std::vector<std::shared_ptr<Hook>> standard_hooks(const Config& cfg, Model& model);

std::shared_ptr<Hook> make_profiler_window(const RunConfig& run);
std::shared_ptr<Hook> make_signal_stop();
std::shared_ptr<Hook> make_checkpoint_writer();
std::shared_ptr<Hook> make_metrics_file();
std::shared_ptr<Hook> make_tensorboard();
std::shared_ptr<Hook> make_progress();
std::shared_ptr<Hook> make_bucket_timeline();
std::shared_ptr<Hook> make_timeline();
std::shared_ptr<Hook> make_report();
std::shared_ptr<Hook> make_model_file(Model& model);
// train.monitor: the best evaluation so far; its weights in <run dir>/best/ (checkpoint.keep_best)
// and a stop after train.early_stop_patience evaluations without a better one (best_model.cpp).
std::shared_ptr<Hook> make_best_model(Model& model);
// A monitored metric's value as the progress line shows it: a loss to 4 decimals ("0.3312"), an
// accuracy in percent ("88.53%"); best_model's lines use it throughout.
std::string metric_text(Monitor metric, double value);

}  // namespace dtrain::detail
