// train.monitor on rank 0: after each evaluation, whether the monitored metric (test_loss:
// lower is better; test_accuracy, test_top5_accuracy: higher) beats the best so far. With
// checkpoint.keep_best a better one writes <run dir>/best/: model.pt (the weights for Python, as
// the run's own), preprocess.json beside it (so `dtrain eval --weights runs/x/best/model.pt`
// checks and uses the run's preprocessing) and best.json {"metric", "value", "step", "epoch",
// "evaluation": that step's, with the keys `dtrain eval --json` prints (hooks/model_record.h)},
// each atomically. With background saves (checkpoint.async; Note [background saves]) the
// evaluation's step copies the weights into host buffers (reused, page-locked on a GPU) and a
// thread writes the three files, best.json last; a better evaluation while they are written, the
// end of training and an error's unwinding wait for them first, and a failed write is an Error
// naming best/ at the next of those. With train.early_stop_patience N, N evaluations in a row
// without a better one ask the loop to stop (the run's end: exit 0, model.pt of the last step). The
// log speaks of the metric by its name and in the progress line's format (metric_text: a loss to 4
// decimals, an accuracy in percent): the rule at the start, each evaluation without a better value
// and the count so far, and the stop with what it leaves. A checkpoint carries the best value, its
// step and the count of evaluations since (state()), so a resumed run goes on as the uninterrupted
// one; from a checkpoint without them (an older dtrain) it takes the best value from best/best.json
// and its count starts at 0, and the log says so.
#include <exception>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "checkpoint/background_write.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/weights.h"
#include "cuda/host_copy.h"
#include "data/preprocess.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "hooks/model_record.h"
#include "hooks/standard.h"
#include "util/dir.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {

std::string metric_text(Monitor metric, double value) {
  if (metric == Monitor::kTestLoss || metric == Monitor::kValLoss) return format("%.4f", value);
  return format("%.2f%%", 100.0 * value);
}

namespace {

std::string evaluations(int64_t n) {
  return std::to_string(n) + (n == 1 ? " evaluation" : " evaluations");
}

// When the run evaluates: "at each epoch's end and every 40 steps".
std::string eval_schedule(const TrainConfig& t) {
  std::string s = t.eval ? "at each epoch's end" : "";
  if (t.eval_every_steps > 0)
    s += (s.empty() ? "" : " and ") + std::string("every ") + std::to_string(t.eval_every_steps) +
         " steps";
  return s;
}

// best/'s files written on a thread of their own, one write at a time.
class BackgroundFiles {
 public:
  BackgroundFiles() = default;
  BackgroundFiles(const BackgroundFiles&) = delete;
  BackgroundFiles& operator=(const BackgroundFiles&) = delete;
  ~BackgroundFiles() { (void)wait(); }  // a failing run's files are finished, never torn
  void start(std::function<void()> body) {
    thread_ = std::thread([this, body = std::move(body)] {
      try {
        body();
      } catch (const std::exception& e) {
        failure_ = first_line(e.what());
      }
    });
  }
  // Waits for the write in flight, if any: its failure's first line, or "".
  std::string wait() {
    if (thread_.joinable()) thread_.join();
    return std::exchange(failure_, std::string());
  }

 private:
  std::thread thread_;
  std::string failure_;
};

class BestModel : public Hook {
 public:
  explicit BestModel(Model& model) : model_(model) {}
  std::string name() const override { return "best_model"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    if (run.rank != 0) return;
    active_ = true;
    classify_ = run.data.num_classes > 0;
    const TrainConfig& t = run.config->train;
    metric_ = t.monitor;
    patience_ = t.early_stop_patience;
    lower_ = metric_ == Monitor::kTestLoss || metric_ == Monitor::kValLoss;
    if (run.config->checkpoint.keep_best && !run.run_dir.empty()) {
      dir_ = join_path(run.run_dir, "best");
      async_ = background_saves(run.config->checkpoint, run.device);
      device_ = run.device;
      preprocess_ = preprocess_json(run.data, run.config->data);
      // The weights' host buffers, allocated now rather than in the first better evaluation.
      if (async_ && (run.test_samples > 0 || run.config->data.val_fraction > 0)) {
        snapshot_.begin();
        snapshot_.reserve(weight_tensors(model_), device_);
      }
      const std::string saved = join_path(dir_, "best.json");
      if (!run.resumed_from.empty() && path_exists(saved)) {
        const auto j = nlohmann::json::parse(read_file(saved), nullptr, /*allow_exceptions=*/false);
        if (j.is_object() && j.value("metric", "") == to_string(metric_) && j.contains("value"))
          best_ = j["value"].get<double>(), best_step_ = j.value("step", int64_t{0});
      }
    }
    if (patience_ > 0) {
      const std::string when = eval_schedule(t);
      log::detail("early stopping: training ends once " + std::string(to_string(metric_)) + " (" +
                  (lower_ ? "lower" : "higher") + " is better) has gone " + evaluations(patience_) +
                  " in a row without improving on its best (train.early_stop_patience)" +
                  (when.empty() ? "" : "; evaluations " + when));
    }
  }

  std::string state() const override {
    if (!active_) return "";
    nlohmann::ordered_json j{{"metric", to_string(metric_)},
                             {"best", nullptr},
                             {"best_step", best_step_},
                             {"since_best", since_best_}};
    if (best_) j["best"] = *best_;
    return j.dump();
  }

  void restore(const std::string& saved) override {
    if (!active_) return;
    const auto j = nlohmann::json::parse(saved, nullptr, /*allow_exceptions=*/false);
    const std::string fresh = "; its count of evaluations without a better one starts at 0";
    if (!j.is_object() || !j.contains("since_best")) {
      log::info(
          "the checkpoint holds no train.monitor state (written by an older dtrain): " +
          (best_ ? format("the best %s is best/best.json's, %s at step %lld", to_string(metric_),
                          metric_text(metric_, *best_).c_str(), static_cast<long long>(best_step_))
                 : std::string("no best value yet")) +
          fresh);
      return;
    }
    const std::string then = j.value("metric", "");
    if (then != to_string(metric_)) {
      best_.reset(), best_step_ = 0, since_best_ = 0;
      log::info("train.monitor was " + then + " when the checkpoint was written, " +
                to_string(metric_) + " now: no best value yet" + fresh);
      return;
    }
    best_.reset();
    if (j["best"].is_number()) best_ = j["best"].get<double>();
    best_step_ = j.value("best_step", int64_t{0});
    since_best_ = j.value("since_best", int64_t{0});
    if (best_)
      log::detail(
          format("train.monitor from the checkpoint: best %s %s at step %lld, %s since "
                 "without a better one",
                 to_string(metric_), metric_text(metric_, *best_).c_str(),
                 static_cast<long long>(best_step_), evaluations(since_best_).c_str()));
  }

  void on_eval(const EvalRecord& r, LoopControl& control) override {
    if (!active_) return;
    std::optional<double> value;
    switch (metric_) {
      case Monitor::kTestLoss:
        value = r.result.loss;
        break;
      case Monitor::kTestAccuracy:
        value = r.result.accuracy;
        break;
      case Monitor::kTestTop5:
        value = r.result.top5;
        break;
      case Monitor::kValLoss:
        value = r.val ? std::optional<double>(r.val->loss) : std::nullopt;
        break;
      case Monitor::kValAccuracy:
        value = r.val ? std::optional<double>(r.val->accuracy) : std::nullopt;
        break;
      case Monitor::kValTop5:
        value = r.val ? r.val->top5 : std::nullopt;
        break;
      case Monitor::kOff:
        return;
    }
    if (!value) return;  // no top-5 with 5 classes or fewer
    if (!best_ || (lower_ ? *value < *best_ : *value > *best_)) {
      best_ = *value, best_step_ = r.step, since_best_ = 0;
      if (!dir_.empty()) write(r);
      return;
    }
    ++since_best_;
    if (patience_ <= 0) return;
    const std::string name = to_string(metric_);
    const std::string best =
        metric_text(metric_, *best_) + " at step " + std::to_string(best_step_);
    if (since_best_ < patience_) {
      log::detail(name + " " + metric_text(metric_, *value) + " at step " + std::to_string(r.step) +
                  ": no improvement on its best, " + best + " (" + std::to_string(since_best_) +
                  " of " + evaluations(patience_) + " without improvement before training stops)");
      return;
    }
    // The reason is kept by the checkpoint and model.json, and quoted when the run is run again.
    const std::string reason = "early stop: " + name + " has not improved on its best, " + best +
                               ", for " + evaluations(since_best_) + " in a row";
    log::info(reason + " (train.early_stop_patience " + std::to_string(patience_) + ", now " +
              metric_text(metric_, *value) + "): training ends after step " +
              std::to_string(r.step) + "; model.pt will hold this step's weights" +
              (dir_.empty() ? std::string()
                            : ", best/model.pt step " + std::to_string(best_step_) + "'s"));
    control.request_stop(reason);
  }

  void on_end(TrainSummary&) override { finish_write(); }

 private:
  void write(const EvalRecord& r) {
    finish_write();  // the previous best's files first: their host buffers are reused
    make_dirs(dir_);
    nlohmann::ordered_json j{
        {"metric", to_string(metric_)}, {"value", *best_}, {"step", r.step}, {"epoch", r.epoch}};
    nlohmann::ordered_json e{{"step", r.step}};
    put_evaluation(e, r.result, classify_);
    j["evaluation"] = e;
    if (r.other)
      j["weights_of"] = r.weights;  // train.ema_decay: the weight average's, or the model's
    const std::string json = j.dump() + "\n";
    const std::string dir = dir_, preprocess = preprocess_;
    auto write_rest = [dir, preprocess, json] {
      write_file_atomic(join_path(dir, "preprocess.json"), preprocess);
      write_file_atomic(join_path(dir, "best.json"), json);
    };
    if (!async_) {
      save_weights(model_, join_path(dir_, "model.pt"));
      write_rest();
    } else {
      snapshot_.begin();
      auto weights = snapshot_.copy(weight_tensors(model_), device_);
      std::shared_ptr<void> copied = snapshot_.finish(device_);
      writer_.start([dir, weights = std::move(weights), copied, kind = model_.name(), write_rest] {
        wait_for_mark(copied);  // the device-to-host copies are done
        write_file_atomic(join_path(dir, "model.pt"),
                          [&](const ByteSink& out) { weights_to(kind, weights, out); }, {});
        write_rest();
      });
    }
    log::detail(format("best %s so far: %s at step %lld: %s%s", to_string(metric_),
                       metric_text(metric_, *best_).c_str(), static_cast<long long>(r.step),
                       join_path(dir_, "model.pt").c_str(),
                       async_ ? " (written in the background)" : ""));
  }

  // Waits for best/'s files in flight; a failed write is an Error naming best/.
  void finish_write() {
    const std::string failure = writer_.wait();
    if (!failure.empty()) throw Error("writing the best model failed: " + failure, dir_);
  }

  Model& model_;
  bool active_ = false;  // rank 0
  bool classify_ = false;
  bool lower_ = false;  // a loss: lower is better
  Monitor metric_ = Monitor::kOff;
  int64_t patience_ = 0, since_best_ = 0, best_step_ = 0;
  std::optional<double> best_;
  std::string dir_, preprocess_;
  bool async_ = false;  // checkpoint.async: best/ written in the background
  at::Device device_ = at::kCPU;
  HostSnapshot snapshot_;  // the weights' host copy, reused from one best to the next
  BackgroundFiles writer_;
};

}  // namespace

std::shared_ptr<Hook> make_best_model(Model& model) { return std::make_shared<BestModel>(model); }

}  // namespace dtrain::detail
