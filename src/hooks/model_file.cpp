// The model's weights for Python on rank 0 at the end of a run with a run directory:
// <run dir>/model.pt, a state_dict under the PyTorch twin's names (checkpoint/weights.h), and
// beside it preprocess.json, how the run's raw data became the model's inputs
// (data/preprocess.h), and model.json, which step they are of, why the run ended there and the
// evaluation of that step (hooks/model_record.h), each written atomically (model.json removed
// first and written last: a model.pt never sits beside another step's record). In Python:
// sd = torch.load("runs/x/model.pt"); twin.load_state_dict(sd);
// pre = json.load(open("runs/x/preprocess.json")).
// A run stopped by a signal (preempted: it resumes) has not ended: it writes no model.pt, so that
// eval and predict never take an unfinished run's weights for its result; its checkpoint holds
// them. A model.pt already there is an earlier end's (a finished run trained on): the summary
// says so, with the step its model.json records, for the run's last line (exit_code). A hook's
// stop (early stopping) is the run's end: model.pt is written.
#include <memory>
#include <string>

#include "checkpoint/weights.h"
#include "data/preprocess.h"
#include "dtrain/log.h"
#include "hooks/model_record.h"
#include "hooks/standard.h"
#include "util/dir.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

class ModelFile : public Hook {
 public:
  explicit ModelFile(Model& model) : model_(model) {}
  std::string name() const override { return "model_file"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    if (run.rank != 0) return;
    run_ = run;
    preprocess_ = preprocess_json(run.data, run.config->data);
  }

  void on_end(TrainSummary& s) override {
    if (run_.run_dir.empty()) return;
    const std::string path = join_path(run_.run_dir, "model.pt");
    const std::string record = join_path(run_.run_dir, "model.json");
    if (s.stop_signal != 0) {  // not ended: the run's last line says so (exit_code)
      if (path_exists(path)) s.model_file = path, s.model_step = recorded_step(record);
      return;
    }
    make_dirs(run_.run_dir);
    remove_tree(record);
    save_weights(model_, path);
    write_file_atomic(join_path(run_.run_dir, "preprocess.json"), preprocess_);
    write_file_atomic(record, model_record(s, run_));
    s.model_file = path, s.model_step = s.steps;
    log::info(
        "weights for Python: " + path + " (step " + std::to_string(s.steps) + " of " +
        std::to_string(s.total_steps) + ", " +
        (s.stopped ? "an early stop" : "the end of training") +
        "; beside it preprocess.json, its preprocessing, and model.json, its step and evaluation)");
  }

 private:
  Model& model_;
  RunInfo run_;             // rank 0's (run_dir "" elsewhere)
  std::string preprocess_;  // preprocess.json's text (rank 0)
};

}  // namespace

std::shared_ptr<Hook> make_model_file(Model& model) { return std::make_shared<ModelFile>(model); }

}  // namespace dtrain::detail
