#include "util/dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "dtrain/error.h"

namespace dtrain::detail {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    for (const auto& n : list_dir(path)) remove_tree(path + "/" + n);
    if (::rmdir(path.c_str()) != 0)
      throw Error(std::string("cannot remove: ") + std::strerror(errno), path);
  } else if (::unlink(path.c_str()) != 0) {
    throw Error(std::string("cannot remove: ") + std::strerror(errno), path);
  }
}

void read_file_chunks(const std::string& path,
                      const std::function<void(const char*, size_t)>& each) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
  std::vector<char> buf(size_t(1) << 20);
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw Error(std::string("cannot read: ") + std::strerror(err), path);
    }
    try {
      each(buf.data(), static_cast<size_t>(n));
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::close(fd);
}

std::string read_file(const std::string& path) {
  std::string out;
  read_file_chunks(path, [&out](const char* p, size_t n) { out.append(p, n); });
  return out;
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error(std::string("cannot open folder: ") + std::strerror(errno), dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL)  // some file systems cannot sync a folder: nothing to do there
    throw Error(std::string("cannot sync folder: ") + std::strerror(err), dir);
}

}  // namespace dtrain::detail
