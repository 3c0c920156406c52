// The checkpoint folder: one sub-folder per checkpoint, `step-<9 digits>`, holding state.pt,
// model.pt (the weights for Python), preprocess.json, one rank-<R>.pt per rank and, last, the
// marker COMPLETE.
// Invariants (tests/unit/test_checkpoint.cpp, tests/e2e/test_checkpoint.sh):
//   - the marker is written (atomically, after every rank's files are durable) only once the
//     whole checkpoint is there; it lists every file with its size and CRC-32 (zlib's, as
//     Python's zlib.crc32), computed while the file was written: nothing is read back to write
//     it (markers of format 1, before 2026-12-05, list FNV-1a hashes and are still read);
//   - a checkpoint without a marker, or whose files differ from what the marker lists, is never
//     loaded: newest_complete() passes it over, and checked() is an Error naming the file;
//     checked() reads each file in chunks, so its memory stays bounded whatever the sizes;
//   - pruning removes only complete checkpoints older than the newest `keep`, and incomplete
//     ones older than the newest complete one, so a crash at any moment of a save leaves the
//     previous complete checkpoint as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/fs.h"

namespace dtrain::detail {

struct MarkedFile {
  std::string name;
  int64_t bytes = 0;
  uint64_t hash = 0;  // CRC-32 (format 2), FNV-1a 64 (format 1)
};

struct Marker {
  int64_t step = 0;
  int world = 0;
  int format = 2;  // 2: CRC-32 hashes (written now); 1: FNV-1a (read only)
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
// Writes `content` as the file `name` inside `checkpoint` (write_file_atomic: temporary name,
// fsync, rename) and returns its entry: size and CRC-32 of the bytes as they were written.
// `pace` (if set) is called with each piece's size (up to 8 MB) before the piece is written.
MarkedFile write_checkpoint_file(const std::string& checkpoint, const std::string& name,
                                 const std::string& content,
                                 const std::function<void(size_t)>& pace = {});
// As above, the contents streamed from `produce` (util/fs.h): never held whole in memory.
MarkedFile write_checkpoint_file(const std::string& checkpoint, const std::string& name,
                                 const ContentWriter& produce,
                                 const std::function<void(size_t)>& pace = {});
// Entries as text, one line each, and back: how each rank hands rank 0 the entries of the files
// it wrote (gather_strings). Parsing names `where` when the text is not such lines.
std::string marker_entries(const std::vector<MarkedFile>& files);
std::vector<MarkedFile> parse_marker_entries(const std::string& text, const std::string& where);
// Writes the marker (format 2) atomically, listing `files` as write_checkpoint_file returned
// them. Reads no file's contents; a file that is not inside `checkpoint` with its listed size is
// an Error naming it.
void write_marker(const std::string& checkpoint, int64_t step, int world,
                  const std::vector<MarkedFile>& files);
// Reads the marker and checks every file it lists against its size and hash: an Error names
// the checkpoint and the file that is missing, truncated or changed, or says that there is no
// marker (an incomplete checkpoint).
Marker checked(const std::string& checkpoint);
// The CRC-32 of `n` bytes (zlib's crc32_z, as Python's zlib.crc32), continuing `crc`: pieces
// chain, crc32_of(b, crc32_of(a)) is the CRC-32 of a followed by b.
uint32_t crc32_of(const char* data, size_t n, uint32_t crc = 0);

}  // namespace dtrain::detail
