// One rank's files of one checkpoint, from what the saving step captured: encoded and written on
// a thread of its own while training goes on (Note [background saves],
// hooks/checkpoint_writer.cpp), or at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/folder.h"
#include "checkpoint/state.h"
#include "dtrain/config.h"

namespace dtrain::detail {

// Whether this rank's saves (checkpoints, best/) are written in the background: checkpoint.async
// on, or auto on a CUDA device.
bool background_saves(const CheckpointConfig& c, const at::Device& device);

// What a rank writes into the checkpoint folder `dir`: rank-<R>.pt from `rank`; rank 0 also
// state.pt from `shared`, model.pt (the weights for Python under the twin's names, from
// shared->model and `model_kind`, checkpoint/weights.h) and preprocess.json. The tensors are host
// copies that nothing else writes to, readable once the GPU has passed `copied`.
struct CapturedCheckpoint {
  std::string dir;
  int64_t step = 0;
  RankState rank;
  std::optional<SharedState> shared;  // rank 0
  std::string model_kind;             // Module::name()
  std::string preprocess;             // preprocess.json's text (rank 0)
  std::shared_ptr<void> copied;       // cuda/host_copy.h's mark; null: ready
  double mb_per_s = 0;                // checkpoint.write_mb_per_s; 0 = no limit
};

// Encodes and writes the files (each atomically: checkpoint/folder.h's write_checkpoint_file),
// keeping to `mb_per_s`: before each piece of up to 8 MB it waits as long as the piece takes at
// that rate. Returns their entries for the marker; a failed write is an Error naming the file.
std::vector<MarkedFile> write_captured(const CapturedCheckpoint& c);

struct WriteResult {
  std::vector<MarkedFile> files;  // the entries, when it succeeded
  std::string failure;            // the Error's first line, when it failed
  double seconds = 0;             // from the start to the last file durable
};
// write_captured, its failure caught: what the ranks agree on before the marker.
WriteResult write_result(const CapturedCheckpoint& c);

// write_result on a thread of its own, one checkpoint at a time.
class BackgroundWrite {
 public:
  using Result = WriteResult;
  BackgroundWrite() = default;
  BackgroundWrite(const BackgroundWrite&) = delete;
  BackgroundWrite& operator=(const BackgroundWrite&) = delete;
  // Waits for a write in flight: a failing run's files are finished, never torn (its marker is
  // another matter: the ranks agree on it, hooks/checkpoint_writer.cpp).
  ~BackgroundWrite();

  // Starts writing `c` (none may be in flight: wait() first).
  void start(CapturedCheckpoint c);
  // A write was started and wait() has not taken its result.
  bool pending() const { return thread_.joinable(); }
  // The write in flight has finished (its result is ready for wait()).
  bool finished() const { return finished_.load(); }
  // Blocks until the write finishes; its result. `waited`: the seconds this call blocked.
  Result wait(double* waited = nullptr);

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  Result result_;
};

}  // namespace dtrain::detail
