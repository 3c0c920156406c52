// Folders and whole files on POSIX calls (no std::filesystem in the library: see util/fs.h):
// listing, removing a tree, reading a file, and making a rename durable.
#pragma once

#include <string>
#include <vector>

namespace dtrain::detail {

// The names in `dir` (not "." or ".."), sorted; empty when `dir` does not exist.
std::vector<std::string> list_dir(const std::string& dir);
bool is_dir(const std::string& path);
// Removes `path` and everything under it (no error when it does not exist); throws an Error
// naming the first path that could not be removed.
void remove_tree(const std::string& path);
// The whole file; throws an Error naming the path when it cannot be read.
std::string read_file(const std::string& path);
// fsync() on a folder, so that the entries created or renamed in it survive a crash.
void sync_dir(const std::string& dir);

}  // namespace dtrain::detail
