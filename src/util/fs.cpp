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

// Writes all of `data` to `fd`, in pieces of at most 8 MiB, each shown to `on_chunk` (when
// set) just before it is written; returns 0 or the errno of the failed write.
int write_all(int fd, const std::string& data, const ChunkObserver& on_chunk = {}) {
  constexpr size_t kChunk = size_t(8) << 20;
  size_t done = 0, seen = 0;
  while (done < data.size()) {
    if (seen == done) {  // the next piece
      seen = done + std::min(kChunk, data.size() - done);
      if (on_chunk) on_chunk(data.data() + done, seen - done);
    }
    const ssize_t n = ::write(fd, data.data() + done, seen - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

[[noreturn]] void os_error(const std::string& what, int err, const std::string& path) {
  throw Error(what + ": " + std::strerror(err), path);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, content, {});
}

void write_file_atomic(const std::string& path, const std::string& content,
                       const ChunkObserver& on_chunk) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) os_error("cannot create", errno, tmp);
  auto fail = [&](const char* what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    os_error(what, err, tmp);
  };
  if (int err = write_all(fd, content, on_chunk)) fail("write failed", err);
  if (::fsync(fd) != 0) fail("fsync failed", errno);
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
