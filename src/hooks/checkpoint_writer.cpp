// Checkpoints (config section `checkpoint`): on every save the loop asks for, each rank writes
// its own state and rank 0 the shared state (with a sharded optimizer, the whole optimizer state
// gathered from every rank) into checkpoint.dir/step-<N>/; once every rank's
// files are durable, rank 0 writes the COMPLETE marker (each file's size and CRC-32, taken as
// the file was written and gathered from its rank), then prunes to checkpoint.keep. Every
// step of that is agreed over the control plane, so a failure on any rank (a full disk, a folder
// that is not shared) is an Error on every rank naming the rank and the file, and no rank waits.
// What the files hold: checkpoint/state.h; the folder's rules: checkpoint/folder.h.
#include <ATen/Context.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/folder.h"
#include "checkpoint/state.h"
#include "checkpoint/weights.h"
#include "data/preprocess.h"
#include "dist/optimizer_shard.h"
#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/version.h"
#include "hooks/standard.h"
#include "util/clock.h"
#include "util/dir.h"
#include "util/format.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

// Runs `f` on this rank, then agrees with every rank: an Error on any rank becomes an Error on
// all of them, naming the rank and its message.
template <class F>
void agreed(Communicator& control, const char* what, F f) {
  std::string failure;
  try {
    f();
  } catch (const std::exception& e) {
    failure = first_line(e.what());
  }
  agree_no_failure(control, failure, std::string("checkpoint ") + what);
}

at::Tensor generator_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// The trainable parameters in the model's order: what the step context hands the optimizer and
// what a sharded optimizer's plan was made from (Note [sharded optimizer]).
std::vector<at::Tensor> trainable(Model& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.named_parameters())
    if (p.value().requires_grad()) out.push_back(p.value());
  return out;
}

NamedTensors model_tensors(Model& model) {
  NamedTensors out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

class CheckpointWriter : public Hook {
 public:
  std::string name() const override { return "checkpoints"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    folder_ = run.config->checkpoint.folder(run.config->run);
    keep_ = run.config->checkpoint.keep;
    if (!run.resumed_from.empty()) last_ = run.resumed_from, last_step_ = run.resumed_step;
    if (run.rank == 0) preprocess_ = preprocess_json(run.data, run.config->data);
  }

  bool on_save(const TrainState& s) override {
    if (folder_.empty()) return false;
    const auto t0 = Clock::now();
    const int64_t step = s.position.step;
    const CheckpointFolder folder(folder_);
    const std::string dir = folder.path_of(step);
    if (has_marker(dir)) {  // this step is saved already (a second request, or resumed here)
      last_ = dir, last_step_ = step;
      return true;
    }
    Communicator& control = *s.control;
    agreed(control, "folder", [&] {
      if (s.rank != 0) return;
      if (path_exists(dir)) remove_tree(dir);  // an incomplete earlier attempt at this step
      make_dirs(dir);
    });
    // The whole optimizer state for rank 0's state.pt: with a sharded optimizer every rank's
    // shard, gathered by every rank before the agreed write (Note [sharded optimizer]).
    NamedTensors optimizer_state;
    if (shards_optimizer(*s.config, s.world))
      optimizer_state = gather_optimizer_state(*s.optimizer, trainable(*s.model), control);
    else if (s.rank == 0)
      optimizer_state = s.optimizer->state();
    std::vector<MarkedFile> written;  // this rank's files: sizes and hashes taken as written
    agreed(control, "write", [&] {
      RankState mine;
      mine.rank = s.rank;
      mine.world = s.world;
      mine.step = step;
      mine.cpu_rng = generator_state(at::detail::getDefaultCPUGenerator());
      if (s.device.is_cuda())
        mine.cuda_rng = generator_state(at::globalContext().defaultGenerator(s.device));
      written.push_back(write_checkpoint_file(dir, rank_file_name(s.rank), encode(mine)));
      if (s.rank == 0) {
        written.push_back(
            write_checkpoint_file(dir, "state.pt", encode(shared(s, optimizer_state))));
        // for Python: torch.load, and how the raw data became the inputs (json.load)
        written.push_back(write_checkpoint_file(dir, "model.pt", weights_bytes(*s.model)));
        written.push_back(write_checkpoint_file(dir, "preprocess.json", preprocess_));
      }
    });
    const auto entries = gather_strings(control, marker_entries(written));
    int64_t bytes = 0;
    agreed(control, "marker", [&] {
      if (s.rank != 0) return;
      std::vector<MarkedFile> files;
      for (int r = 0; r < s.world; ++r) {
        const std::string where =
            join_path(dir, rank_file_name(r)) + " (rank " + std::to_string(r) + "'s entries)";
        for (auto& f : parse_marker_entries(entries[static_cast<size_t>(r)], where))
          files.push_back(std::move(f));
      }
      // the marker's order: state.pt, model.pt, preprocess.json, then the ranks' files
      std::stable_partition(files.begin(), files.end(),
                            [](const MarkedFile& f) { return f.name.rfind("rank-", 0) != 0; });
      for (const auto& f : files) {
        if (!path_exists(join_path(dir, f.name)))
          throw Error(
              "checkpoint file missing on rank 0 (is checkpoint.dir on a file system "
              "every rank shares?)",
              join_path(dir, f.name));
        bytes += f.bytes;
      }
      write_marker(dir, step, s.world, files);
      sync_dir(folder_);
      for (const auto& old : folder.prune(keep_)) log::detail("checkpoint removed: " + old);
    });
    last_ = dir, last_step_ = step;
    log::info("checkpoint saved: " + dir + " (step " + std::to_string(step) + ", " +
              format("%.1f", bytes / 1e6) + " MB, " + format("%.2f", seconds_since(t0)) + " s; " +
              s.reason + ")");
    return true;
  }

  void on_end(TrainSummary& summary) override {
    summary.checkpoint = last_;
    summary.checkpoint_step = last_.empty() ? -1 : last_step_;
  }

 private:
  static SharedState shared(const TrainState& s, NamedTensors optimizer_state) {
    SharedState st;
    st.position = s.position;
    st.world = s.world;
    st.global_batch = s.config->train.global_batch;
    st.config = config_values(*s.config);
    st.config_hash = format("%016llx", static_cast<unsigned long long>(s.config->hash()));
    st.dtrain_version = DTRAIN_VERSION;
    st.libtorch_version = compat::libtorch_version();
    st.model = model_tensors(*s.model);
    st.optimizer = std::move(optimizer_state);
    if (s.scaler) st.scaler = s.scaler->state();
    st.ema = s.ema;
    st.ema_updates = s.ema_updates;
    st.hooks = s.hook_states;
    return st;
  }

  std::string folder_;
  std::string preprocess_;  // preprocess.json's text (rank 0)
  int64_t keep_ = 1;
  std::string last_;
  int64_t last_step_ = -1;
};

}  // namespace

std::shared_ptr<Hook> make_checkpoint_writer() { return std::make_shared<CheckpointWriter>(); }

}  // namespace dtrain::detail
