// A session: one run wired the way the `dtrain` command wires it, for the command and for C++
// programs alike (examples/), and the error policy that ends the whole job when any rank fails.
//
//   int main(int argc, char** argv) {
//     return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
//       dtrain::Session s = dtrain::build_session(rt, dtrain::Config::from_file("x.yaml"),
//       "x.yaml"); s.trainer->add_hook(std::make_shared<MyHook>()); return
//       dtrain::exit_code(s.trainer->fit());
//     });
//   }
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"
#include "dtrain/runtime.h"
#include "dtrain/trainer.h"

namespace dtrain {

struct Session {
  Config config;  // resolved for the runtime's world size
  Splits data;
  std::shared_ptr<Model> model;
  std::unique_ptr<Trainer> trainer;  // with the standard hooks
};

// Resolves `cfg` for rt.world() ranks (once) and checks what the config and this build alone
// can answer (run.profile_steps without Kineto), agreed across ranks (an error is one
// AgreedError); sets up logging (run.quiet), the device and the communicators, and logs the
// version, the world and one line on the config (`origin` names where it came from: the batch
// arithmetic, where the whole config is written), and on rank 0 a warning for each key the run
// will not use (session/unused_keys.h). Then, unless `config_only`, seeds LibTorch with
// run.seed, refuses a run that has finished (its directory's model.pt and a checkpoint at the end
// of training: the loop's AgreedError, before any data is read), builds the datasets and the model
// (from the registry, by model.name), loads model.init_weights on rank 0 (these agreed too), and
// builds the Trainer.
Session build_session(Runtime& rt, Config cfg, const std::string& origin, bool config_only = false);
// The same with the datasets made by `make_data` (called on every rank with the resolved config
// and the rank's device, agreed) in place of make_datasets(): a program's own data, or `dtrain
// eval`'s test split alone, preprocessed as the run's preprocess.json records (its Splits hold
// the test split as both train and test: eval only evaluates). A null `make_data`: as config_only.
using MakeData = std::function<Splits(const Config&, const at::Device&)>;
Session build_session(Runtime& rt, Config cfg, const std::string& origin,
                      const MakeData& make_data);

// The process exit code for a finished fit(): 0 when training ran to its end (or a hook stopped
// it); kExitPreempted (75, EX_TEMPFAIL) when a signal stopped it and a checkpoint of the stop
// step was written, so that a batch script requeues the job and it resumes; 128 + the signal
// when a signal stopped it and no checkpoint could be written (the run writes no files). A
// signal's stop is said here in one line on rank 0: "stopped by SIGUSR1 after step S of T:
// checkpoint DIR written, no model.pt (the run has not ended); run the same command again to
// resume (exit code 75)", or, when a run trained on after its end was stopped, "... checkpoint
// DIR written (the run has not ended: these weights are in it alone); runs/x/model.pt still
// holds step N, the run's earlier end (model.json); run the same command again ...".
constexpr int kExitPreempted = 75;
int exit_code(const TrainSummary& summary);

// "dtrain 0.1.0 (LibTorch 2.11, CUDA 12.8 + NCCL 2.27.3, driver 570.124.06, built 2026-12-02)"
// (the CUDA runtime loaded, NCCL, the NVIDIA driver when NVML is there); a CPU build:
// "dtrain 0.1.0 (LibTorch 1.13, CPU only, MPI, built 2026-12-02)".
std::string version_text();

// dtrain's error policy: starts the Runtime (MPI) and runs `body`. An AgreedError (dtrain/error.h:
// every rank throws it together, e.g. a config error, a missing data file) is printed once,
// "[rank R] error: <where>: <what>" by the lowest rank R that failed, and every rank finalizes
// MPI and returns 1. Any other exception, on any rank, prints that line on that rank and ends
// the whole job (MPI_Abort when there are other ranks, after ncclCommAbort on this rank's NCCL
// communicator), so no rank is left waiting; the exit code is then 1.
// Otherwise returns body's result.
int run_guarded(int* argc, char*** argv, const std::function<int(Runtime&)>& body);

}  // namespace dtrain
