#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "checkpoint/folder.h"
#include "dtrain/error.h"
#include "util/dir.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

// A regular file with something in it: an empty file, or a device, holds nothing to lose.
bool has_content(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

// The folder that holds `path` ("" at the top of a relative path).
std::string parent_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string host_name() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

}  // namespace

std::string run_directory_holder(const Config& cfg) {
  const std::string dir = cfg.run.run_dir();
  if (dir.empty()) return "";
  const std::string path = join_path(dir, ".lock");
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return "";
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  ::close(fd);
  if (!held) return "";
  std::string holder = read_file(path);
  while (!holder.empty() && holder.back() == '\n') holder.pop_back();
  return holder.empty() ? "holder unknown" : holder;
}

RunDirectory::RunDirectory(const Config& cfg, Communicator& control)
    : dir_(cfg.run.run_dir()), checkpoints_(cfg.checkpoint.folder(cfg.run)) {
  if (dir_.empty()) return;
  std::string failure;
  if (control.rank() == 0) {
    try {
      // The folders this run makes, so that a failed start removes them (mark_started).
      for (std::string d = dir_; !d.empty() && d != "/" && d != "." && !is_dir(d); d = parent_of(d))
        created_.push_back(d);
      make_dirs(dir_);
      const std::string path = join_path(dir_, ".lock");
      lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
      if (lock_fd_ < 0) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      if (::fcntl(lock_fd_, F_SETLK, &fl) != 0) {
        std::string holder = read_file(path);
        while (!holder.empty() && holder.back() == '\n') holder.pop_back();
        throw Error("this run directory is in use by another dtrain run (" +
                    (holder.empty() ? std::string("holder unknown") : holder) +
                    "); give this run another run.name");
      }
      const std::string me =
          format("pid %d on %s", static_cast<int>(::getpid()), host_name().c_str());
      if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) < 0)
        throw Error(std::string("cannot write: ") + std::strerror(errno), path);
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
  }
  agree_no_failure(control, failure, "claiming the run directory", dir_);
}

RunDirectory::~RunDirectory() {
  // A failed start: the lock file goes while it is still held (no other run can have taken it),
  // then each folder this run made, when empty.
  if (!started_ && lock_fd_ >= 0 && !created_.empty()) {
    ::unlink(join_path(dir_, ".lock").c_str());
    for (const std::string& d : created_)
      if (::rmdir(d.c_str()) != 0) break;
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void RunDirectory::check_fresh_start(bool resuming, Communicator& control) const {
  if (dir_.empty()) return;
  std::string failure;
  if (control.rank() == 0 && !resuming) {
    std::string found;
    for (const char* f : {"metrics.jsonl", "model.pt"})
      if (has_content(join_path(dir_, f))) found += std::string(found.empty() ? "" : ", ") + f;
    if (!checkpoints_.empty() && !CheckpointFolder(checkpoints_).complete().empty())
      found += std::string(found.empty() ? "" : ", ") + "checkpoints in " + checkpoints_;
    if (!found.empty())
      failure = "this run directory holds an earlier run's files (" + found +
                ") and this run does not resume it; nothing is overwritten: choose another "
                "run.name, resume (checkpoint.resume=auto or a path), or remove the directory";
  }
  agree_no_failure(control, failure, "starting in the run directory", dir_);
}

}  // namespace dtrain::detail
