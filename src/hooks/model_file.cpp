// The model's weights for Python on rank 0 at the end of a run with a run directory:
// <run dir>/model.pt, a state_dict under the PyTorch twin's names (checkpoint/weights.h), written
// atomically. In Python: sd = torch.load("runs/x/model.pt"); twin.load_state_dict(sd).
#include <memory>
#include <string>

#include "checkpoint/weights.h"
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
    if (run.rank == 0) run_dir_ = run.run_dir;
  }

  void on_end(TrainSummary&) override {
    if (run_dir_.empty()) return;
    make_dirs(run_dir_);
    const std::string path = join_path(run_dir_, "model.pt");
    save_weights(model_, path);
    log::info("weights for Python: " + path);
  }

 private:
  Model& model_;
  std::string run_dir_;  // set on rank 0 only
};

}  // namespace

std::shared_ptr<Hook> make_model_file(Model& model) { return std::make_shared<ModelFile>(model); }

}  // namespace dtrain::detail
