// Trainer: the data-parallel training loop of one rank. It plans the epochs, drives the loader,
// runs each step through a step engine (eager, or a CUDA graph), evaluates when due, and sends
// events to hooks (hooks.h); everything else plugs in as a hook.
// Invariants (tests/dist/): every rank starts from rank 0's parameters; every optimizer step
// sees gradients averaged over the same global batch whatever the world size and micro-batch
// (N ranks x B/N == 1 rank x B); evaluation counts every test sample exactly once across ranks;
// the config is never changed (config().hash() is the same before and after fit()).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/faults.h"
#include "dtrain/hooks.h"
#include "dtrain/models.h"
#include "dtrain/records.h"

namespace dtrain {

class Trainer {
 public:
  // `cfg` must be resolved for comm.world() ranks (build_session does it). `comm` carries
  // gradients and parameters (NCCL or MPI); `control` (MPI, CPU tensors) carries metrics and
  // agreement; they may be the same object on CPU. Ranks agree here on the config, the
  // parameters and the datasets, and rank 0's parameters and buffers are broadcast; the model is
  // run once on one training sample to check its outputs against the data (train/loss.h). The
  // standard hooks are installed, in this order (hooks/standard.h): the profiler window
  // (run.profile_steps > 0), stop signals, checkpoints, the metrics file, TensorBoard
  // (run.tensorboard), progress lines, the bucket timeline, the timeline (run.timeline), the
  // end-of-run report, the weights for Python (model.pt) and the best model (train.monitor:
  // best/ and early stopping). Running out of memory here (the
  // model to the device, the gradient buckets, the optimizer state, the output check) ends every
  // rank alike: the same AgreedError, saying what the training state needs on each rank against
  // what the device allows, and the settings that free it. `faults`: tests only, failures to
  // inject from the start-up on (FaultInjector::before_start_up; set_fault_injector after).
  Trainer(const Config& cfg, Communicator& comm, Communicator& control, at::Device device,
          std::shared_ptr<Model> model, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, std::shared_ptr<FaultInjector> faults = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Adds a hook after the ones already there. Every rank must add the same hooks.
  void add_hook(std::shared_ptr<Hook> hook);
  // Removes the hooks named `name` (Hook::name(), e.g. "report"), before fit(); whether there
  // was one. Every rank must remove the same hooks. `dtrain bench` removes the end-of-run report
  // from its settings' runs: its table says what each setting did.
  bool remove_hook(const std::string& name);
  // Tests only: failures to inject into steps (none by default).
  void set_fault_injector(std::shared_ptr<FaultInjector> faults);
  // On (the default): a step that runs out of memory on any rank is redone with a smaller
  // micro-batch. Off (`dtrain bench`, which measures exactly the size asked for): fit() throws
  // a dtrain::Error naming train.micro_batch on every rank alike, at the same step.
  void set_out_of_memory_recovery(bool on);
  // On (the default): warnings on rank 0 when train.max_steps, train.warmup_steps or
  // run.profile_start do not fit the run's planned steps. Off (`dtrain bench`, which sets the
  // run's length itself): none.
  void set_length_warnings(bool on);

  // Train for train.epochs (or until train.max_steps, or until a hook asks to stop), resuming
  // from a checkpoint when checkpoint.resume finds one and evaluating after each epoch if asked.
  // An exception leaves the ranks out of step: the caller ends the job (run_guarded() does).
  TrainSummary fit();
  // Evaluate on the test split (every sample once over all ranks).
  EvalResult evaluate();
  // Before fit(): a validation split (data.val_fraction, Splits::val), evaluated beside the test
  // split at every evaluation (EvalRecord::val; train.monitor's val_* metrics). Every rank alike.
  void set_validation(std::shared_ptr<const Dataset> val);

  Model& model();
  const Config& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain
