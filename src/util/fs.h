// Small file-system helpers on POSIX calls. dtrain avoids std::filesystem in the library: the
// pip build of LibTorch exports its own copies of some std::filesystem symbols, which crash when
// they win the link.
#pragma once

#include <string>

namespace dtrain::detail {

// mkdir -p; throws dtrain::Error naming the path.
void make_dirs(const std::string& path);
bool path_exists(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);
// Write `content` to path.tmp, fsync, rename over `path`: readers see the old file or the new
// one, never a torn one. Throws dtrain::Error naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace dtrain::detail
