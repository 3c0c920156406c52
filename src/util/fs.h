// Small file-system helpers on POSIX calls. dtrain avoids std::filesystem in the library: the
// pip build of LibTorch exports its own copies of some std::filesystem symbols, which crash when
// they win the link.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace dtrain::detail {

// mkdir -p; throws dtrain::Error naming the path.
void make_dirs(const std::string& path);
bool path_exists(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);
// Write `content` to path.tmp, fsync, rename over `path`: readers see the old file or the new
// one, never a torn one. A failed open, write, fsync, close or rename is a dtrain::Error naming
// the file and the OS reason (strerror); path.tmp is removed then.
void write_file_atomic(const std::string& path, const std::string& content);
// As above; `on_chunk` sees each piece of `content` (at most 8 MiB, in order) just before it is
// written: a hash of the bytes as they go out, while they are in cache.
using ChunkObserver = std::function<void(const char* data, size_t size)>;
void write_file_atomic(const std::string& path, const std::string& content,
                       const ChunkObserver& on_chunk);
// Bytes handed on piece by piece, in order: a file's contents as an encoder produces them.
using ByteSink = std::function<void(const char* data, size_t size)>;
// What writes a file's whole contents into the sink it is given, in one call.
using ContentWriter = std::function<void(const ByteSink& out)>;
// write_file_atomic with the contents streamed from `produce` (called once), so a file of any
// size is never held whole in memory; `on_chunk` sees each piece (at most 8 MiB) before it is
// written. An Error `produce` throws removes path.tmp and goes on. On Linux the pages written
// go to the disk as they pile up (every 64 MiB, sync_file_range) and leave the page cache once
// there (posix_fadvise), so a checkpoint of gigabytes holds no gigabytes of dirty pages and
// pushes no other file (the training data) out of the cache; the fsync at the end then finds
// little left to write.
void write_file_atomic(const std::string& path, const ContentWriter& produce,
                       const ChunkObserver& on_chunk);

// A file written piece by piece (a log of records), with POSIX calls so that every failure is
// seen: a failed open, write or close is a dtrain::Error naming the file and the OS reason
// ("No space left on device"). Each write() reaches the kernel before it returns.
class OutputFile {
 public:
  OutputFile() = default;
  // Creates or truncates the file; with `append`, writes after what it holds.
  explicit OutputFile(const std::string& path, bool append = false);
  ~OutputFile();  // closes; call close() to see its errors
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const std::string& data);
  void close();  // fsync and close; throws on failure
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace dtrain::detail
