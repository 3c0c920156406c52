// For tests/e2e/test_hooks.sh: a run whose hook throws on the last rank only, after step 3. The
// other ranks are then inside the next step's collectives; the error policy must still end
// every rank, with one line naming the failing rank, the hook and the step.
//
//   mpirun -np 2 dtrain_e2e_hook_throws [section.key=value ...]
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/hooks.h"
#include "dtrain/session.h"

namespace {

class Thrower : public dtrain::Hook {
 public:
  explicit Thrower(int rank) : rank_(rank) {}
  std::string name() const override { return "thrower"; }
  void on_start(const dtrain::RunInfo& run, dtrain::LoopControl&) override {
    mine_ = run.rank == rank_;
  }
  void on_step(const dtrain::StepRecord& r, dtrain::LoopControl&) override {
    if (mine_ && r.step == 3) throw std::runtime_error("the hook gave up");
  }

 private:
  int rank_;
  bool mine_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> overrides(argv + 1, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::Session s = dtrain::build_session(rt,
                                              dtrain::Config::from_string(R"(
run: {dir: "", log_every: 1, timeout_s: 300}
model: {name: mlp, hidden: [8]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 2048,
       synthetic_test_size: 0, synthetic_features: 4, synthetic_classes: 2, workers: 1}
train: {epochs: 1, global_batch: 16, optimizer: sgd, lr: 0.1}
)",
                                                                          "hook_throws", overrides),
                                              "hook_throws");
    s.trainer->add_hook(std::make_shared<Thrower>(rt.world() - 1));
    s.trainer->fit();
    return 0;
  });
}
