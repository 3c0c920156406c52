// Stop signals (install_stop_signals, dtrain/runtime.h): at each step boundary and after each
// evaluation, a signal this rank received becomes a request to save and stop; the loop agrees on
// it with every rank (Note [hook requests]), so all ranks write the same checkpoint and end.
#include <memory>
#include <string>

#include "dtrain/log.h"
#include "hooks/standard.h"
#include "runtime/signals.h"

namespace dtrain::detail {
namespace {

class SignalStop : public Hook {
 public:
  std::string name() const override { return "signals"; }
  void on_step(const StepRecord& r, LoopControl& control) override { check(r.step, control); }
  void on_eval(const EvalRecord& r, LoopControl& control) override { check(r.step, control); }

 private:
  void check(int64_t step, LoopControl& control) {
    const int sig = stop_signal();
    if (sig == 0 || asked_) return;
    asked_ = true;
    const std::string why = std::string(signal_name(sig)) + " received";
    control.request_save(why);
    control.request_stop(why, sig);
  }

  bool asked_ = false;
};

}  // namespace

std::shared_ptr<Hook> make_signal_stop() { return std::make_shared<SignalStop>(); }

}  // namespace dtrain::detail
