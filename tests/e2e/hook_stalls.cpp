// For tests/e2e/test_watchdog.sh: a run whose hook stalls on rank 1 only, in on_step after step 3,
// while the other ranks go on into the next step's collectives. The watchdog (run.timeout_s) must
// end the job and name rank 1.
//
//   mpirun -np 3 dtrain_e2e_hook_stalls sleep|freeze [section.key=value ...]
//
// sleep: the training thread sleeps (the process, and its watchdog, still run);
// freeze: the whole process stops itself (SIGSTOP), watchdog thread included.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/hooks.h"
#include "dtrain/session.h"

namespace {

class Staller : public dtrain::Hook {
 public:
  explicit Staller(bool freeze) : freeze_(freeze) {}
  std::string name() const override { return "staller"; }
  void on_start(const dtrain::RunInfo& run, dtrain::LoopControl&) override {
    mine_ = run.rank == 1;
  }
  void on_step(const dtrain::StepRecord& r, dtrain::LoopControl&) override {
    if (!mine_ || r.step != 3) return;
    if (freeze_) {
      kill(getpid(), SIGSTOP);
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(120));
    }
  }

 private:
  bool freeze_;
  bool mine_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "sleep" && mode != "freeze") {
    std::fprintf(stderr, "usage: dtrain_e2e_hook_stalls sleep|freeze [section.key=value ...]\n");
    return 2;
  }
  const std::vector<std::string> overrides(argv + 2, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::Session s = dtrain::build_session(rt,
                                              dtrain::Config::from_string(R"(
run: {dir: "", log_every: 1, timeout_s: 3}
model: {name: mlp, hidden: [8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 2048,
       synthetic_test_size: 0, synthetic_features: 4, synthetic_classes: 2, workers: 1}
train: {epochs: 1, global_batch: 24, optimizer: sgd, lr: 0.1}
)",
                                                                          "hook_stalls", overrides),
                                              "hook_stalls");
    s.trainer->add_hook(std::make_shared<Staller>(mode == "freeze"));
    s.trainer->fit();
    return 0;
  });
}
