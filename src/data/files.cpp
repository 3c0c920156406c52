// Finding data files (POSIX stat and glob, not std::filesystem: the pip wheels of LibTorch 2.x
// export their own std::filesystem symbols, which can shadow libstdc++'s).
#include "data/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "dtrain/config.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

void walk(const std::string& dir, std::set<std::pair<dev_t, ino_t>>& seen,
          std::vector<std::pair<std::string, std::vector<std::string>>>& out,
          const std::string& key) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !seen.insert({st.st_dev, st.st_ino}).second) return;
  std::vector<std::string> files, folders;
  for (auto& [name, folder] : folder_entries(dir, key)) (folder ? folders : files).push_back(name);
  out.emplace_back(dir, std::move(files));
  for (const auto& f : folders) walk(dir + "/" + f, seen, out, key);
}

std::string under_path(const DataConfig& cfg, const std::string& name) {
  if (name.front() == '/' || cfg.path.empty()) return name;
  return cfg.path + (cfg.path.back() == '/' ? "" : "/") + name;
}

}  // namespace

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    while (!entry.empty() && entry.front() == ' ') entry.erase(0, 1);
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    if (!entry.empty()) out.push_back(entry);
  }
  return out;
}

std::string data_file(const DataConfig& cfg, const std::string& name, const std::string& key) {
  if (name.empty()) throw Error("file name is empty", key);
  const std::string path = under_path(cfg, name);
  if (!is_regular_file(path)) {
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    std::string hint;
    if (name.front() != '/' && !is_directory(cfg.path)) {
      hint = " (data.path '" + cfg.path + "' is not a directory)";
    }
    throw Error((exists ? "not a regular file: " : "file not found: ") + path + hint, key);
  }
  return path;
}

std::vector<std::string> expand_files(const DataConfig& cfg, const std::string& patterns,
                                      const std::string& key) {
  std::vector<std::string> files;
  for (const std::string& entry : split_list(patterns)) {
    const std::string pattern = under_path(cfg, entry);
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
      globfree(&g);
      throw Error("no file matches " + pattern, key);
    }
    if (rc != 0) {
      globfree(&g);
      throw Error("cannot expand " + pattern, key);
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  if (files.empty()) throw Error("names no file", key);
  return files;
}

std::string files_text(const std::vector<std::string>& files) {
  return files.size() == 1 ? files[0]
                           : files[0] + " and " + std::to_string(files.size() - 1) + " more";
}

size_t read_file_into(const std::string& path, std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (bytes.size() < size) bytes.resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": cannot read byte " + std::to_string(got) + " of " +
                  std::to_string(size) + ": " + (n == 0 ? "the file ended" : std::strerror(err)));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (size == 0) throw Error(path + ": an empty file");
  return size;
}

std::vector<std::pair<std::string, bool>> folder_entries(const std::string& dir,
                                                         const std::string& key) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) throw Error("cannot read the folder " + dir + ": " + std::strerror(errno), key);
  std::vector<std::pair<std::string, bool>> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool folder = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st {};
      folder = ::stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    out.emplace_back(name, folder);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::string, std::vector<std::string>>> walk_folder(const std::string& dir,
                                                                          const std::string& key) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::set<std::pair<dev_t, ino_t>> seen;
  walk(dir, seen, out, key);
  return out;
}

}  // namespace dtrain::detail
