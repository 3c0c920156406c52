// HookList: the loop's hooks, called in order. Each call is watched by the watchdog and a hook
// that throws becomes a dtrain::Error naming the hook, the event and the step; a request a hook
// makes (stop, save) is logged on its rank with the hook's name and reason, except a standard
// hook's (`add(hook, true)`): those say their requests in the user's terms themselves (an early
// stop names the metric; a stop signal's is the run's last line).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dtrain/hooks.h"
#include "runtime/watchdog.h"

namespace dtrain::detail {

class HookList {
 public:
  explicit HookList(Watchdog& watchdog) : watchdog_(watchdog) {}
  void add(std::shared_ptr<Hook> hook, bool standard = false);
  // Removes the hooks named `name`; whether there was one.
  bool remove(const std::string& name);

  void on_start(const RunInfo& run, LoopControl& control);
  void on_step_begin(int64_t step);
  void on_step(const StepRecord& record, LoopControl& control);
  void on_eval(const EvalRecord& record, LoopControl& control);
  void prepare_save(const TrainState& state);
  // Whether any hook wrote the state.
  bool on_save(const TrainState& state);
  // Every hook's state() by name, those that give "" left out (TrainState::hook_states).
  std::map<std::string, std::string> states(int64_t step);
  // A resumed run: each hook's restore() with its entry of `saved` ("" when it has none).
  void restore(const std::map<std::string, std::string>& saved, int64_t step);
  void on_end(TrainSummary& summary);

 private:
  // Calls f(hook) for every hook; `event` is a string literal (the watchdog keeps the pointer).
  template <class F>
  void each(const char* event, int64_t step, LoopControl* control, F f);

  Watchdog& watchdog_;
  std::vector<std::shared_ptr<Hook>> hooks_;
  std::set<const Hook*> standard_;  // standard_hooks()'s: they log their own requests
};

}  // namespace dtrain::detail
