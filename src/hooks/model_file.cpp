// The model's weights for Python on rank 0 at the end of a run with a run directory:
// <run dir>/model.pt, a state_dict under the PyTorch twin's names (checkpoint/weights.h), and
// beside it preprocess.json, how the run's raw data became the model's inputs
// (data/preprocess.h), each written atomically. In Python: sd = torch.load("runs/x/model.pt");
// twin.load_state_dict(sd); pre = json.load(open("runs/x/preprocess.json")).
// A run stopped by a signal (preempted: it resumes) has not ended: it writes no model.pt, so that
// eval and predict never take an unfinished run's weights for its result; its checkpoint holds
// them. A hook's stop (early stopping) is the run's end: model.pt is written.
#include <memory>
#include <string>

#include "checkpoint/weights.h"
#include "data/preprocess.h"
#include "dtrain/log.h"
#include "hooks/standard.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

class ModelFile : public Hook {
 public:
  explicit ModelFile(Model& model) : model_(model) {}
  std::string name() const override { return "model_file"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    if (run.rank != 0) return;
    run_dir_ = run.run_dir;
    preprocess_ = preprocess_json(run.data, run.config->data);
  }

  void on_end(TrainSummary& summary) override {
    if (run_dir_.empty()) return;
    if (summary.stop_signal != 0) return;  // not ended: the run's last line says so (exit_code)
    make_dirs(run_dir_);
    const std::string path = join_path(run_dir_, "model.pt");
    save_weights(model_, path);
    write_file_atomic(join_path(run_dir_, "preprocess.json"), preprocess_);
    log::info("weights for Python: " + path + " (its preprocessing: preprocess.json beside it)");
  }

 private:
  Model& model_;
  std::string run_dir_;     // set on rank 0 only
  std::string preprocess_;  // preprocess.json's text (rank 0)
};

}  // namespace

std::shared_ptr<Hook> make_model_file(Model& model) { return std::make_shared<ModelFile>(model); }

}  // namespace dtrain::detail
