// Folders and whole files on POSIX calls (no std::filesystem in the library: see util/fs.h):
// listing, removing a tree, reading a file (whole or in chunks), and making a rename durable.
#pragma once

#include <cstddef>
#include <functional>
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
// The file in pieces of at most 1 MiB, in order, each handed to `each` (memory stays bounded
// whatever the file's size); errors as read_file's.
void read_file_chunks(const std::string& path,
                      const std::function<void(const char*, size_t)>& each);
// fsync() on a folder, so that the entries created or renamed in it survive a crash.
void sync_dir(const std::string& dir);

}  // namespace dtrain::detail
