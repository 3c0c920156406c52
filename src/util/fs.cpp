#include "util/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dtrain/error.h"

namespace dtrain::detail {

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b[0] == '/')) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

void make_dirs(const std::string& path) {
  if (path.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error(std::string("cannot create directory: ") + std::strerror(errno), partial);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw Error("not a directory", path);
}

namespace {

// Writes all of data[0, size) to `fd`; returns 0 or the errno of the failed write.
int write_all(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

int write_all(int fd, const std::string& data) { return write_all(fd, data.data(), data.size()); }

[[noreturn]] void os_error(const std::string& what, int err, const std::string& path) {
  throw Error(what + ": " + std::strerror(err), path);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, content, {});
}

void write_file_atomic(const std::string& path, const std::string& content,
                       const ChunkObserver& on_chunk) {
  write_file_atomic(
      path, [&content](const ByteSink& out) { out(content.data(), content.size()); }, on_chunk);
}

namespace {

// The sink of write_file_atomic's streamed form: pieces of at most 8 MiB, each shown to the
// observer and written; every 64 MiB the pages written so far are handed to the disk, and those
// of the 64 MiB before, waited for, leave the page cache (write_file_atomic's contract).
class FileSink {
 public:
  FileSink(int fd, std::string path, const ChunkObserver& on_chunk)
      : fd_(fd), path_(std::move(path)), on_chunk_(on_chunk) {}

  void put(const char* data, size_t size) {
    constexpr size_t kPiece = size_t(8) << 20;
    while (size > 0) {
      const size_t n = std::min(size, kPiece);
      if (on_chunk_) on_chunk_(data, n);
      if (int err = write_all(fd_, data, n)) os_error("write failed", err, path_);
      data += n, size -= n, written_ += static_cast<off_t>(n);
      if (written_ - handed_ >= kHandOn) hand_on();
    }
  }

  // After the fsync: the whole file out of the page cache (its pages are clean now).
  void drop_cache() const {
#ifdef __linux__
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
#endif
  }

 private:
  static constexpr off_t kHandOn = off_t(64) << 20;

  // Starts the writeback of what was written since the last time; waits for the range handed on
  // before and drops it from the cache. Failures show again at the fsync, which reports them.
  void hand_on() {
#ifdef __linux__
    ::sync_file_range(fd_, handed_, written_ - handed_, SYNC_FILE_RANGE_WRITE);
    if (handed_ > settled_) {
      ::sync_file_range(
          fd_, settled_, handed_ - settled_,
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      ::posix_fadvise(fd_, settled_, handed_ - settled_, POSIX_FADV_DONTNEED);
      settled_ = handed_;
    }
#endif
    handed_ = written_;
  }

  int fd_;
  std::string path_;
  const ChunkObserver& on_chunk_;
  off_t written_ = 0, handed_ = 0, settled_ = 0;
};

}  // namespace

void write_file_atomic(const std::string& path, const ContentWriter& produce,
                       const ChunkObserver& on_chunk) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) os_error("cannot create", errno, tmp);
  auto fail = [&](const char* what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    os_error(what, err, tmp);
  };
  FileSink sink(fd, tmp, on_chunk);
  try {
    produce([&sink](const char* data, size_t size) { sink.put(data, size); });
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) fail("fsync failed", errno);
  sink.drop_cache();
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("close failed", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    os_error("cannot rename " + tmp + " into place", err, path);
  }
}

OutputFile::OutputFile(const std::string& path, bool append) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd_ < 0) os_error("cannot create", errno, path);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const std::string& data) {
  if (fd_ < 0) throw Error("write to a closed file (internal error)", path_);
  if (int err = write_all(fd_, data)) os_error("write failed", err, path_);
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // fsync reports errors of earlier writes that the kernel had buffered; a file that cannot be
  // synced (a pipe, a terminal) answers EINVAL, which is no loss.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    ::close(fd);
    os_error("fsync failed", err, path_);
  }
  if (::close(fd) != 0) os_error("close failed", errno, path_);
}

}  // namespace dtrain::detail
