// The data files a config names: one name under data.path, or comma-separated glob patterns.
// Invariant: data_file() returns only an existing regular file, and expand_files() only paths
// that exist (what the patterns match; the readers then open them); anything else is an Error
// naming the path or pattern and the config key that named it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtrain {
struct DataConfig;
}

namespace dtrain::detail {

// `name` under cfg.path (an absolute name as is); a missing file, or one that is not a regular
// file, is an Error naming the path and `key` (and data.path when it is not a directory).
std::string data_file(const DataConfig& cfg, const std::string& name, const std::string& key);

// The files the comma-separated glob patterns name, each pattern's matches sorted, in pattern
// order; relative patterns are under cfg.path. A pattern that matches nothing, or a list that
// names no file, is an Error naming `key`.
std::vector<std::string> expand_files(const DataConfig& cfg, const std::string& patterns,
                                      const std::string& key);

// The first file and how many more ("a.bin and 4 more"), for the log's one line on a dataset.
std::string files_text(const std::vector<std::string>& files);

bool is_regular_file(const std::string& path);
bool is_directory(const std::string& path);

// The whole file into `bytes` (grown as needed, never shrunk: a buffer reused file after file),
// its size returned; a file that cannot be opened or read, or is empty, is an Error naming it.
size_t read_file_into(const std::string& path, std::vector<uint8_t>& bytes);

// The entries of `dir` (symbolic links followed) as (name, is a folder), sorted by name; an Error
// naming `key` when it cannot be read.
std::vector<std::pair<std::string, bool>> folder_entries(const std::string& dir,
                                                         const std::string& key);

// os.walk(dir, followlinks=True): every folder under `dir` (itself first, then each subfolder's
// walk in name order) with its file names, sorted; a folder reached twice through links is
// walked once. A folder that cannot be read is an Error naming `key`.
std::vector<std::pair<std::string, std::vector<std::string>>> walk_folder(const std::string& dir,
                                                                          const std::string& key);

// The comma-separated entries of `list`, without surrounding spaces; empty entries dropped.
std::vector<std::string> split_list(const std::string& list);

}  // namespace dtrain::detail
