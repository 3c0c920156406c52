// best/ (src/hooks/best_model.cpp) written in the background with checkpoint.async (issue 52,
// point 1: the run's files follow the checkpoints' rule): the same bytes as a synchronous write,
// best.json last, a second best waiting for the first's files, and the end of training waiting
// for the write in flight.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>

#include "checkpoint/weights.h"
#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/models.h"
#include "dtrain/records.h"
#include "hooks/standard.h"
#include "model_support.h"
#include "test_support.h"
#include "util/dir.h"
#include "util/fs.h"

namespace dtrain {
namespace {

using detail::join_path;
using detail::make_dirs;
using detail::read_file;

// A run of the best-model hook on a linear model: `async` the checkpoint.async setting.
struct BestRun {
  test::HookRun run;
  std::shared_ptr<Model> model;
  std::shared_ptr<Hook> hook;
  explicit BestRun(AsyncSave async) {
    run.cfg.model.name = "linear";
    run.cfg.train.global_batch = 16;
    run.cfg.train.monitor = Monitor::kTestLoss;
    run.cfg.train.eval_every_steps = 10;
    run.cfg.checkpoint.keep_best = true;
    run.cfg.checkpoint.async = async;
    const DataSpec spec = test::image_spec({1, 4, 4}, 10);
    run.info.data = spec;
    make_dirs(run.info.run_dir);
    model = make_model("linear", run.cfg.model, spec);
    hook = detail::make_best_model(*model);
    hook->on_start(run.info, run.control);
  }
  void eval(int64_t step, double loss) {
    EvalRecord r;
    r.step = step, r.epoch = 1;
    r.result.loss = loss, r.result.accuracy = 0.5, r.result.count = 100;
    hook->on_eval(r, run.control);
  }
  void set_weights(double v) {
    at::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.fill_(v);
  }
  std::string file(const std::string& name) const {
    return read_file(join_path(join_path(run.info.run_dir, "best"), name));
  }
};

TEST(BestFiles, WrittenInTheBackgroundAreTheBytesOfASynchronousWrite) {
  BestRun sync(AsyncSave::kOff), async(AsyncSave::kOn);
  for (BestRun* r : {&sync, &async}) {
    r->set_weights(0.25);
    r->eval(10, 1.0);
    // A better evaluation while the first best's files may still be written: it waits for them,
    // then copies the weights as they are now.
    r->set_weights(0.5);
    r->eval(20, 0.5);
    r->set_weights(0.75);  // after the copy: not in best/
    r->eval(30, 0.9);      // not better: nothing written
    TrainSummary summary;
    r->hook->on_end(summary);  // waits for the write in flight
  }
  EXPECT_EQ(async.file("model.pt"), sync.file("model.pt"));
  EXPECT_EQ(async.file("best.json"), sync.file("best.json"));
  EXPECT_EQ(async.file("preprocess.json"), sync.file("preprocess.json"));
  async.set_weights(0.5);
  EXPECT_EQ(async.file("model.pt"), detail::weights_bytes(*async.model)) << "step 20's weights";
  EXPECT_NE(async.file("best.json").find("\"step\":20"), std::string::npos);
}

TEST(BestFiles, AFailedBackgroundWriteIsAnErrorAtTheEnd) {
  BestRun async(AsyncSave::kOn);
  // model.pt cannot be written: a folder is where it would go.
  make_dirs(join_path(join_path(async.run.info.run_dir, "best"), "model.pt/x"));
  async.eval(10, 1.0);  // the copy; the files are written in the background
  TrainSummary summary;
  try {
    async.hook->on_end(summary);
    ADD_FAILURE() << "the failed write went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("writing the best model failed"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("best"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain
