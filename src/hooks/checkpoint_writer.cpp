// Checkpoints (config section `checkpoint`): on every save the loop asks for, each rank writes
// its own state and rank 0 the shared state into checkpoint.dir/step-<N>/; once every rank's files
// are durable, rank 0 writes the COMPLETE marker (each file's size and CRC-32, taken as the file
// was written and gathered from its rank), then prunes to checkpoint.keep. Every step of that is
// agreed over the control plane, so a failure on any rank (a full disk, a folder that is not
// shared) is an Error on every rank naming the rank and the file, and no rank waits. What the files
// hold: checkpoint/state.h; the folder's rules: checkpoint/folder.h. With dist.shard_optimizer each
// rank writes its own shard of the optimizer state into its rank file, all ranks at once, where
// rank 0 alone once wrote the whole state gathered from them.
//
// Note [background saves]: with checkpoint.async (auto: on CUDA ranks) the saving step only
// copies the state into host memory (checkpoint/snapshot.h: buffers allocated before the first
// step (Hook::prepare_save) and reused, page-locked for a GPU, the copies queued on the training
// stream) and hands it to a
// thread that encodes, hashes and writes this rank's files (checkpoint/background_write.h) while
// training goes on. The marker still comes last and is agreed: from the next step on, every
// step boundary adds to a small all-reduce on the control plane whether this rank's write has
// finished, pipelined as the loop's own requests are (Note [hook requests]): started in one
// on_step, read in the next. When every rank's has, all ranks together (the same step, the same
// collectives) agree that none failed, gather the entries, and rank 0 writes the marker and
// prunes. So a kill at any moment of a background write leaves the previous checkpoint complete
// and the newest one resumed; a failed write (a full disk) is an Error on every rank at that
// step, naming the rank and the file, and training stops. A save that comes while the previous
// write still runs waits for it first (the log says how long), as do the end of training, a
// signal's stop (on_end) and an error's unwinding (the writer's destructor: the files are
// finished, the marker is not written).
#include <ATen/Context.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/background_write.h"
#include "checkpoint/folder.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/state.h"
#include "checkpoint/weights.h"
#include "data/preprocess.h"
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

class CheckpointWriter : public Hook {
 public:
  std::string name() const override { return "checkpoints"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    folder_ = run.config->checkpoint.folder(run.config->run);
    keep_ = run.config->checkpoint.keep;
    mb_per_s_ = run.config->checkpoint.write_mb_per_s;
    async_ = background_saves(run.config->checkpoint, run.device);
    pinned_ = run.device.is_cuda();
    if (!run.resumed_from.empty()) last_ = run.resumed_from, last_step_ = run.resumed_step;
    if (run.rank == 0) preprocess_ = preprocess_json(run.data, run.config->data);
  }

  // The host buffers of a background save, allocated once before training (page-locking them
  // in the first save's step would stall it: 0.7 s for GPT-2 124M's 1.4 GB).
  void prepare_save(const TrainState& s) override {
    if (folder_.empty() || !async_) return;
    const auto t0 = Clock::now();
    capture(s, "", /*allocate_only=*/true);
    if (s.rank == 0 && snapshot_.bytes() > 0) {
      reported_bytes_ = snapshot_.bytes();
      log::info("checkpoint.async: " + format("%.1f", reported_bytes_ / 1e6) + " MB of " +
                (pinned_ ? "page-locked " : "") +
                "host memory allocated to hold the state while it is written (rank 0; " +
                format("%.2f", seconds_since(t0)) +
                " s, before the first step; reused by every save)");
    }
  }

  bool on_save(const TrainState& s) override {
    if (folder_.empty()) return false;
    control_ = s.control;
    world_ = s.world, rank_ = s.rank;
    const int64_t step = s.position.step;
    if (pending_ && pending_->step == step) return true;  // asked twice at one step
    finish_pending("step " + std::to_string(step) + "'s save");
    const auto t0 = Clock::now();
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
    CapturedCheckpoint c = capture(s, dir);
    pending_ = Pending{dir, step, t0, s.reason};
    if (!async_) {
      finish_write(write_result(c));
      return true;
    }
    writer_.start(std::move(c));
    log::detail("checkpoint step " + std::to_string(step) + ": state copied in " +
                format("%.3f", seconds_since(t0)) + " s, written in the background");
    return true;
  }

  void on_step(const StepRecord&, LoopControl&) override {
    if (!pending_) return;
    if (world_ == 1) {
      if (writer_.finished()) finish_write(writer_.wait());
      return;
    }
    if (poll_) {  // started at the previous boundary: every rank has read it by now
      poll_->wait();
      poll_.reset();
      if (poll_flag_.item<int64_t>() == 0) {
        finish_write(writer_.wait());
        return;
      }
    }
    poll_flag_ = at::tensor({writer_.finished() ? int64_t{0} : int64_t{1}}, at::kLong);
    poll_ = control_->all_reduce_async(poll_flag_, ReduceOp::kMax);
  }

  void on_end(TrainSummary& summary) override {
    finish_pending("the end of training");
    if (async_ && pinned_) summary.memory.checkpoint_pinned = snapshot_.bytes();
    summary.checkpoint = last_;
    summary.checkpoint_step = last_.empty() ? -1 : last_step_;
  }

 private:
  struct Pending {
    std::string dir;
    int64_t step = 0;
    Clock::time_point started;
    std::string reason;
  };

  // What the files will hold, with every tensor copied to this rank's host buffers
  // (`allocate_only`: the buffers allocated, nothing copied, the result not for writing).
  CapturedCheckpoint capture(const TrainState& s, const std::string& dir,
                             bool allocate_only = false) {
    // With a sharded optimizer each rank writes its own shard's entries into its rank file, all
    // ranks at once (Note [sharded optimizer]); otherwise rank 0 the whole state into state.pt.
    const bool sharded = s.optimizer_is_shard;
    auto copy = [&](const NamedTensors& tensors) {
      if (!allocate_only) return snapshot_.copy(tensors, s.device);
      snapshot_.reserve(tensors, s.device);
      return NamedTensors{};
    };
    snapshot_.begin();
    CapturedCheckpoint c;
    c.dir = dir;
    c.step = s.position.step;
    c.mb_per_s = mb_per_s_;
    c.rank.rank = s.rank;
    c.rank.world = s.world;
    c.rank.step = s.position.step;
    c.rank.cpu_rng = generator_state(at::detail::getDefaultCPUGenerator());
    if (s.device.is_cuda())
      c.rank.cuda_rng = generator_state(at::globalContext().defaultGenerator(s.device));
    if (sharded) c.rank.optimizer_shard = copy(s.optimizer->state());
    if (s.rank == 0) {
      SharedState st = shared(s);
      st.model = copy(weight_tensors(*s.model));
      if (sharded) {
        st.optimizer_shards = s.world;
      } else {
        st.optimizer = copy(s.optimizer->state());
      }
      if (s.scaler) st.scaler = copy(s.scaler->state());
      st.ema = copy(s.ema);
      c.shared = std::move(st);
      c.model_kind = s.model->name();
      c.preprocess = preprocess_;
    }
    if (allocate_only) return c;
    c.copied = snapshot_.finish(s.device);
    if (async_ && s.rank == 0 && snapshot_.bytes() != reported_bytes_) {
      reported_bytes_ = snapshot_.bytes();
      log::info("checkpoint.async: " + format("%.1f", reported_bytes_ / 1e6) + " MB of " +
                (s.device.is_cuda() ? "page-locked " : "") +
                "host memory hold the state while it is written (rank 0; allocated once, reused)");
    }
    return c;
  }

  // Waits for the write in flight, if any, and completes it on every rank (`why`: what waits).
  void finish_pending(const std::string& why) {
    if (!pending_) return;
    double waited = 0;
    BackgroundWrite::Result r = writer_.wait(&waited);
    if (poll_) poll_->wait(), poll_.reset();  // the last boundary's, unread
    if (waited > 0.05) {
      log::info("checkpoint: " + why + " waited " + format("%.2f", waited) + " s for step " +
                std::to_string(pending_->step) + "'s background write to finish");
    }
    finish_write(std::move(r));
  }

  // Every rank with its write's result: agreed that none failed, the entries gathered, and on
  // rank 0 the marker and the pruning.
  void finish_write(BackgroundWrite::Result r) {
    const Pending p = *pending_;
    pending_.reset();
    Communicator& control = *control_;
    agree_no_failure(control, r.failure, "checkpoint write", p.dir);
    const auto entries = gather_strings(control, marker_entries(r.files));
    int64_t bytes = 0;
    agreed(control, "marker", [&] {
      if (rank_ != 0) return;
      std::vector<MarkedFile> files;
      for (int k = 0; k < world_; ++k) {
        const std::string where =
            join_path(p.dir, rank_file_name(k)) + " (rank " + std::to_string(k) + "'s entries)";
        for (auto& f : parse_marker_entries(entries[static_cast<size_t>(k)], where))
          files.push_back(std::move(f));
      }
      // the marker's order: state.pt, model.pt, preprocess.json, then the ranks' files
      std::stable_partition(files.begin(), files.end(),
                            [](const MarkedFile& f) { return f.name.rfind("rank-", 0) != 0; });
      for (const auto& f : files) {
        if (!path_exists(join_path(p.dir, f.name)))
          throw Error(
              "checkpoint file missing on rank 0 (is checkpoint.dir on a file system "
              "every rank shares?)",
              join_path(p.dir, f.name));
        bytes += f.bytes;
      }
      write_marker(p.dir, p.step, world_, files);
      sync_dir(folder_);
      for (const auto& old : CheckpointFolder(folder_).prune(keep_))
        log::detail("checkpoint removed: " + old);
    });
    last_ = p.dir, last_step_ = p.step;
    log::info("checkpoint saved: " + p.dir + " (step " + std::to_string(p.step) + ", " +
              format("%.1f", bytes / 1e6) + " MB, " +
              (async_ ? "written in the background in " + format("%.2f", r.seconds) + " s"
                      : format("%.2f", seconds_since(p.started)) + " s") +
              "; " + p.reason + ")");
  }

  static SharedState shared(const TrainState& s) {
    SharedState st;
    st.position = s.position;
    st.world = s.world;
    st.global_batch = s.config->train.global_batch;
    st.config = config_values(*s.config);
    st.config_hash = format("%016llx", static_cast<unsigned long long>(s.config->hash()));
    st.dtrain_version = DTRAIN_VERSION;
    st.libtorch_version = compat::libtorch_version();
    st.ema_updates = s.ema_updates;
    st.hooks = s.hook_states;
    return st;
  }

  std::string folder_;
  std::string preprocess_;  // preprocess.json's text (rank 0)
  int64_t keep_ = 1;
  double mb_per_s_ = 0;
  bool async_ = false;
  bool pinned_ = false;  // the snapshot is page-locked (a CUDA rank)
  std::string last_;
  int64_t last_step_ = -1;
  Communicator* control_ = nullptr;
  int world_ = 1, rank_ = 0;
  HostSnapshot snapshot_;  // rank 0's host copy of the shared state
  int64_t reported_bytes_ = 0;
  BackgroundWrite writer_;
  std::optional<Pending> pending_;  // a save whose marker is not written yet
  std::unique_ptr<Work> poll_;      // the all-reduce of "still writing" in flight
  at::Tensor poll_flag_;
};

}  // namespace

std::shared_ptr<Hook> make_checkpoint_writer() { return std::make_shared<CheckpointWriter>(); }

}  // namespace dtrain::detail
