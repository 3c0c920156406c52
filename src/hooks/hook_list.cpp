#include "hooks/hook_list.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "dtrain/error.h"
#include "dtrain/log.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

// The start of the Error for a hook that threw (built only then: each() runs every step).
std::string failed(const Hook& hook, const char* event, int64_t step) {
  return "hook '" + hook.name() + "' failed in " + event + " at step " + std::to_string(step) +
         ": ";
}

}  // namespace

void HookList::add(std::shared_ptr<Hook> hook, bool standard) {
  if (!hook) throw Error("Trainer::add_hook: no hook given");
  if (standard) standard_.insert(hook.get());
  hooks_.push_back(std::move(hook));
}

bool HookList::remove(const std::string& name) {
  const size_t before = hooks_.size();
  for (const auto& h : hooks_)
    if (h->name() == name) standard_.erase(h.get());
  hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(),
                              [&](const std::shared_ptr<Hook>& h) { return h->name() == name; }),
               hooks_.end());
  return hooks_.size() != before;
}

template <class F>
void HookList::each(const char* event, int64_t step, LoopControl* control, F f) {
  watchdog_.beat(event);
  for (const auto& hook : hooks_) {
    const bool stop_before = control && control->stop_requested();
    const bool save_before = control && control->save_requested();
    try {
      f(*hook);
    } catch (const AgreedError& e) {
      throw AgreedError(failed(*hook, event, step) + e.cause(), e.where(), e.first_rank());
    } catch (const Error& e) {
      throw Error(failed(*hook, event, step) + e.cause(), e.where());
    } catch (const std::exception& e) {
      throw Error(failed(*hook, event, step) + first_line(e.what()));
    }
    if (!control) continue;
    // A stop signal's requests (every rank's signal hook makes them) are reported once, by the
    // run's last line (session.h: exit_code); other requests are said where they are made.
    if (control->stop_requested() && !stop_before && control->stop_signal() != 0) continue;
    if (standard_.count(hook.get())) continue;  // it says its requests itself
    if (control->stop_requested() && !stop_before)
      log::every("hook '" + hook->name() + "' asks to stop after step " + std::to_string(step) +
                 ": " + control->stop_reason());
    if (control->save_requested() && !save_before)
      log::every("hook '" + hook->name() + "' asks to save after step " + std::to_string(step) +
                 ": " + control->save_reason());
  }
}

void HookList::on_start(const RunInfo& run, LoopControl& control) {
  each("hooks: on_start", 0, &control, [&](Hook& h) { h.on_start(run, control); });
}

void HookList::on_step_begin(int64_t step) {
  each("hooks: on_step_begin", step, nullptr, [&](Hook& h) { h.on_step_begin(step); });
}

void HookList::on_step(const StepRecord& record, LoopControl& control) {
  each("hooks: on_step", record.step, &control, [&](Hook& h) { h.on_step(record, control); });
}

void HookList::on_eval(const EvalRecord& record, LoopControl& control) {
  each("hooks: on_eval", record.step, &control, [&](Hook& h) { h.on_eval(record, control); });
}

void HookList::prepare_save(const TrainState& state) {
  each("hooks: prepare_save", state.position.step, nullptr,
       [&](Hook& h) { h.prepare_save(state); });
}

bool HookList::on_save(const TrainState& state) {
  bool saved = false;
  each("hooks: on_save", state.position.step, nullptr,
       [&](Hook& h) { saved = h.on_save(state) || saved; });
  return saved;
}

std::map<std::string, std::string> HookList::states(int64_t step) {
  std::map<std::string, std::string> out;
  each("hooks: state", step, nullptr, [&](Hook& h) {
    std::string s = h.state();
    if (!s.empty()) out[h.name()] = std::move(s);
  });
  return out;
}

void HookList::restore(const std::map<std::string, std::string>& saved, int64_t step) {
  each("hooks: restore", step, nullptr, [&](Hook& h) {
    const auto it = saved.find(h.name());
    h.restore(it == saved.end() ? std::string() : it->second);
  });
}

void HookList::on_end(TrainSummary& summary) {
  each("hooks: on_end", summary.steps, nullptr, [&](Hook& h) { h.on_end(summary); });
}

}  // namespace dtrain::detail
