// The checkpoint folder: one sub-folder per checkpoint, `step-<9 digits>`, holding state.pt,
// model.pt (the weights for Python), one rank-<R>.pt per rank and, last, the marker COMPLETE.
// Invariants (tests/unit/test_checkpoint.cpp, tests/e2e/test_checkpoint.sh):
//   - the marker is written (atomically, after every rank's files are durable) only once the
//     whole checkpoint is there; it lists every file with its size and FNV-1a hash;
//   - a checkpoint without a marker, or whose files differ from what the marker lists, is never
//     loaded: newest_complete() passes it over, and checked() is an Error naming the file;
//   - pruning removes only complete checkpoints older than the newest `keep`, and incomplete
//     ones older than the newest complete one, so a crash at any moment of a save leaves the
//     previous complete checkpoint as it was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::detail {

struct MarkedFile {
  std::string name;
  int64_t bytes = 0;
  uint64_t hash = 0;
};

struct Marker {
  int64_t step = 0;
  int world = 0;
  std::vector<MarkedFile> files;
};

class CheckpointFolder {
 public:
  explicit CheckpointFolder(std::string dir);
  const std::string& dir() const { return dir_; }
  // dir/step-000000120
  std::string path_of(int64_t step) const;
  // The checkpoints that have a marker, oldest first (by step).
  std::vector<std::string> complete() const;
  // The newest of those, or "" when there is none.
  std::string newest_complete() const;
  // Removes complete checkpoints beyond the newest `keep` and incomplete ones older than the
  // newest complete one. Returns the paths removed.
  std::vector<std::string> prune(int64_t keep) const;

 private:
  std::string dir_;
};

bool has_marker(const std::string& checkpoint);
// Hashes `files` (names inside `checkpoint`) and writes the marker atomically.
void write_marker(const std::string& checkpoint, int64_t step, int world,
                  const std::vector<std::string>& files);
// Reads the marker and checks every file it lists against its size and hash: an Error names
// the checkpoint and the file that is missing, truncated or changed, or says that there is no
// marker (an incomplete checkpoint).
Marker checked(const std::string& checkpoint);
// The FNV-1a hash of a file's bytes.
uint64_t hash_bytes(const std::string& bytes);

}  // namespace dtrain::detail
