// The run directory (run.dir/run.name) belongs to one run at a time, and a new run never
// overwrites an earlier run's files.
// Invariants (tests/e2e/test_checkpoint.sh):
//   - while a run trains, rank 0 holds an exclusive lock on <run dir>/.lock (fcntl, released by
//     the kernel when the process ends, however it ends); a second run of the same directory
//     stops with an Error naming the directory and the holder;
//   - a run that does not resume stops with an Error naming the directory when it already holds
//     an earlier run's files (metrics.jsonl, model.pt, checkpoints); a resumed run appends;
//   - a run that fails before it starts (mark_started) leaves no directory it created behind:
//     its .lock is removed and each folder it made is removed when empty (rmdir: never another
//     run's files), as its error unwinds (tests/e2e/test_data_errors.sh).
#pragma once

#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/config.h"

namespace dtrain::detail {

// Whether another process holds <run dir>/.lock now (fcntl's F_GETLK: nothing is taken): its
// holder as the lock file says ("pid N on host", or "holder unknown"), or "" when the file is
// absent or free. For checks that run before RunDirectory claims the directory, so that a busy
// directory is reported as busy.
std::string run_directory_holder(const Config& cfg);

class RunDirectory {
 public:
  // Creates the directory and takes the lock (rank 0; every rank learns the outcome: a
  // collective on `control`). Nothing happens when the run writes no files.
  RunDirectory(const Config& cfg, Communicator& control);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // After the resume decision: a fresh start into a directory with an earlier run's files is
  // an Error (on every rank).
  void check_fresh_start(bool resuming, Communicator& control) const;

  // Training starts (the hooks' on_start, which write the run's files, come next): from here on
  // the directory stays whatever happens.
  void mark_started() { started_ = true; }

 private:
  std::string dir_;
  std::string checkpoints_;
  int lock_fd_ = -1;
  std::vector<std::string> created_;  // the folders rank 0 made, the deepest first
  bool started_ = false;
};

}  // namespace dtrain::detail
