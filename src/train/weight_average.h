// train.ema_decay: an exponential moving average of the model's weights and buffers, kept on its
// device beside the model, with torchvision's reference rule (references/classification/train.py
// with utils.ExponentialMovingAverage, an AveragedModel over parameters and buffers):
//   d = 1 - min(1, (1 - train.ema_decay) * global_batch * train.ema_every / train.epochs)
//   every train.ema_every optimizer steps: the first update copies the model, each later one
//   ema = d * ema + (1 - d) * model, one multi-tensor update over every floating tensor (integer
//   buffers, such as a BatchNorm's batch count, are copied);
//   until train.ema_warmup_steps steps are done the count of updates is reset after each, so the
//   first update after the warmup copies the model again (torchvision resets it in the epochs of
//   the learning-rate warmup).
// Every rank holds the same average of the same parameters; the BatchNorm buffers' averages follow
// each rank's own, and the Trainer averages them over the ranks with the model's wherever they
// are read (Note [BatchNorm on N ranks]). Evaluations score both weights (swap() exchanges them
// in place, so tensors a CUDA graph captured keep their memory); checkpoints carry the average
// and its count, and a resumed run continues them exactly.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/models.h"
#include "dtrain/records.h"

namespace dtrain::detail {

// The decay per update that torchvision's rule gives for these settings.
double ema_decay_per_update(const TrainConfig& t);

class WeightAverage;
// An evaluation of both weights: `rec.result` holds the model's when called; `evaluate_swapped`
// scores the average once swap() has put it in the model.
// After it `rec.result` holds the evaluation of the weights `ema_output` names and `rec.other`
// the other's, and the model holds the weights `rec.result` scored (swap back after the hooks).
void evaluate_average(WeightAverage& ema, bool ema_output, EvalRecord& rec,
                      const std::function<EvalResult()>& evaluate_swapped);

class WeightAverage {
 public:
  // A copy of `model`'s parameters and buffers (named_parameters() then named_buffers(), as a
  // checkpoint names them), not yet counted as an update.
  WeightAverage(Model& model, const TrainConfig& t);

  // After an optimizer step, `steps_done` counting it: the update, when one is due.
  void after_step(int64_t steps_done);
  // Exchanges the model's values and the average's, in place; twice is the identity.
  void swap();
  // The average set to the model's values, its count to 0 (a resumed run without one).
  void restart();
  bool swapped() const { return swapped_; }

  double decay() const { return decay_; }
  // The updates counted since the last copy of the model (0: the next update copies it).
  int64_t updates() const { return updates_; }
  void set_updates(int64_t n) { updates_ = n; }
  // The average under the model's names: its own device tensors (a checkpoint's values are
  // copied into them), whichever way swap() stands.
  std::vector<std::pair<std::string, at::Tensor>> named() const;

 private:
  Model& model_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> current_;  // the model's tensors (its own, not copies)
  std::vector<at::Tensor> average_;
  std::vector<size_t> floating_, integral_;  // indices into the two lists
  double decay_;
  int64_t every_, warmup_, updates_ = 0;
  bool swapped_ = false;
};

}  // namespace dtrain::detail
