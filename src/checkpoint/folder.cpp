#include "checkpoint/folder.h"

#include <sys/stat.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "dtrain/error.h"
#include "util/dir.h"
#include "util/fs.h"
#include "util/hash.h"

namespace dtrain::detail {
namespace {

constexpr const char* kMarker = "COMPLETE";
constexpr const char* kPrefix = "step-";
constexpr const char* kFormat2 = "dtrain checkpoint 2";  // CRC-32 per file
constexpr const char* kFormat1 = "dtrain checkpoint 1";  // FNV-1a per file (read only)

// The step of a folder name `step-000000120`, or -1 when the name is not one.
int64_t step_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() <= 5) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// A hash as the marker writes it: 8 hex digits for a CRC-32 (format 2), 16 for FNV-1a (1).
std::string hex(uint64_t h, int format) {
  char buf[17];
  std::snprintf(buf, sizeof buf, format == 1 ? "%016llx" : "%08llx",
                static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json entry_json(const MarkedFile& f) {
  return {{"name", f.name}, {"bytes", f.bytes}, {"crc32", hex(f.hash, 2)}};
}

// One entry of a marker's "files"; the hash under "crc32" (format 2) or "fnv1a" (format 1).
MarkedFile entry_of(const nlohmann::json& j, int format) {
  MarkedFile f;
  f.name = j.at("name").get<std::string>();
  f.bytes = j.at("bytes").get<int64_t>();
  const std::string h = j.at(format == 1 ? "fnv1a" : "crc32").get<std::string>();
  if (h.empty() || h.size() > (format == 1 ? 16u : 8u) ||
      h.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error("the hash '" + h + "' of " + f.name + " is not hexadecimal");
  f.hash = std::stoull(h, nullptr, 16);
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.bytes < 0)
    throw Error("a file entry '" + f.name + "' of " + std::to_string(f.bytes) + " bytes");
  return f;
}

// The size and hash (CRC-32 for format 2, FNV-1a for 1) of a file, read in chunks.
MarkedFile digest_of_file(const std::string& path, int format) {
  MarkedFile f;
  uint32_t crc = 0;
  uint64_t fnv = kFnv1aStart;
  read_file_chunks(path, [&](const char* p, size_t n) {
    f.bytes += static_cast<int64_t>(n);
    if (format == 1)
      fnv = fnv1a(std::string_view(p, n), fnv);
    else
      crc = crc32_of(p, n, crc);
  });
  f.hash = format == 1 ? fnv : crc;
  return f;
}

int64_t size_of(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

}  // namespace

uint32_t crc32_of(const char* data, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(data), n));
}

CheckpointFolder::CheckpointFolder(std::string dir) : dir_(std::move(dir)) {}

std::string CheckpointFolder::path_of(int64_t step) const {
  char name[32];
  std::snprintf(name, sizeof name, "%s%09lld", kPrefix, static_cast<long long>(step));
  return join_path(dir_, name);
}

std::vector<std::string> CheckpointFolder::complete() const {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& n : list_dir(dir_)) {
    const int64_t s = step_of(n);
    const std::string p = join_path(dir_, n);
    if (s >= 0 && is_dir(p) && has_marker(p)) found.emplace_back(s, p);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string CheckpointFolder::newest_complete() const {
  const auto all = complete();
  return all.empty() ? "" : all.back();
}

std::vector<std::string> CheckpointFolder::prune(int64_t keep) const {
  const auto done = complete();
  std::vector<std::string> removed;
  if (done.empty()) return removed;
  const int64_t newest = step_of(done.back().substr(done.back().rfind('/') + 1));
  for (size_t i = 0; i + static_cast<size_t>(keep) < done.size(); ++i) {
    remove_tree(done[i]);
    removed.push_back(done[i]);
  }
  for (const auto& n : list_dir(dir_)) {
    const int64_t s = step_of(n);
    const std::string p = join_path(dir_, n);
    if (s >= 0 && s < newest && is_dir(p) && !has_marker(p)) {
      remove_tree(p);
      removed.push_back(p);
    }
  }
  return removed;
}

bool has_marker(const std::string& checkpoint) {
  return path_exists(join_path(checkpoint, kMarker));
}

MarkedFile write_checkpoint_file(const std::string& checkpoint, const std::string& name,
                                 const std::string& content,
                                 const std::function<void(size_t)>& pace) {
  return write_checkpoint_file(
      checkpoint, name, [&content](const ByteSink& out) { out(content.data(), content.size()); },
      pace);
}

MarkedFile write_checkpoint_file(const std::string& checkpoint, const std::string& name,
                                 const ContentWriter& produce,
                                 const std::function<void(size_t)>& pace) {
  MarkedFile f;
  f.name = name;
  uint32_t crc = 0;
  write_file_atomic(join_path(checkpoint, name), produce, [&](const char* p, size_t n) {
    if (pace) pace(n);
    crc = crc32_of(p, n, crc);
    f.bytes += static_cast<int64_t>(n);
  });
  f.hash = crc;
  return f;
}

std::string marker_entries(const std::vector<MarkedFile>& files) {
  std::string out;
  for (const auto& f : files) out += entry_json(f).dump() + "\n";
  return out;
}

std::vector<MarkedFile> parse_marker_entries(const std::string& text, const std::string& where) {
  std::vector<MarkedFile> out;
  std::istringstream lines(text);
  std::string line;
  try {
    while (std::getline(lines, line)) {
      if (!line.empty()) out.push_back(entry_of(nlohmann::json::parse(line), 2));
    }
  } catch (const std::exception& e) {
    throw Error(std::string("not a checkpoint file entry: ") + e.what(), where);
  }
  return out;
}

void write_marker(const std::string& checkpoint, int64_t step, int world,
                  const std::vector<MarkedFile>& files) {
  nlohmann::json j;
  j["format"] = kFormat2;
  j["step"] = step;
  j["world"] = world;
  j["files"] = nlohmann::json::array();
  for (const auto& f : files) {
    const std::string p = join_path(checkpoint, f.name);
    const int64_t on_disk = size_of(p);
    if (on_disk != f.bytes)
      throw Error(on_disk < 0 ? std::string("checkpoint file is missing")
                              : "checkpoint file has " + std::to_string(on_disk) +
                                    " bytes, its writer wrote " + std::to_string(f.bytes),
                  p);
    j["files"].push_back(entry_json(f));
  }
  write_file_atomic(join_path(checkpoint, kMarker), j.dump(1) + "\n");
  sync_dir(checkpoint);
}

Marker checked(const std::string& checkpoint) {
  const std::string path = join_path(checkpoint, kMarker);
  if (!is_dir(checkpoint)) throw Error("no such checkpoint folder", checkpoint);
  if (!path_exists(path))
    throw Error(
        "incomplete checkpoint (no COMPLETE marker: its save did not finish); it is "
        "never loaded",
        checkpoint);
  Marker m;
  try {
    const int64_t size = size_of(path);
    if (size < 0 || size > (int64_t(64) << 20))
      throw Error("unreadable checkpoint marker: not a file of at most 64 MiB", path);
    const nlohmann::json j = nlohmann::json::parse(read_file(path));
    const std::string format = j.at("format").get<std::string>();
    if (format == kFormat2)
      m.format = 2;
    else if (format == kFormat1)
      m.format = 1;
    else
      throw Error("unknown checkpoint format '" + format + "' (this dtrain reads '" + kFormat2 +
                      "' and '" + kFormat1 + "')",
                  path);
    m.step = j.at("step").get<int64_t>();
    m.world = j.at("world").get<int>();
    for (const auto& f : j.at("files")) m.files.push_back(entry_of(f, m.format));
  } catch (const Error& e) {
    if (e.where().empty()) throw Error("unreadable checkpoint marker: " + e.cause(), path);
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string("unreadable checkpoint marker: ") + e.what(), path);
  }
  for (const auto& f : m.files) {
    const std::string p = join_path(checkpoint, f.name);
    const int64_t on_disk = size_of(p);
    if (on_disk < 0) throw Error("checkpoint file is missing", p);
    if (on_disk != f.bytes)
      throw Error("checkpoint file is truncated or changed: " + std::to_string(on_disk) +
                      " bytes, the marker says " + std::to_string(f.bytes),
                  p);
    const MarkedFile read = digest_of_file(p, m.format);
    if (read.bytes != f.bytes)
      throw Error("checkpoint file is truncated or changed: " + std::to_string(read.bytes) +
                      " bytes, the marker says " + std::to_string(f.bytes),
                  p);
    if (read.hash != f.hash)
      throw Error(std::string("checkpoint file is corrupt: its ") +
                      (m.format == 1 ? "FNV-1a hash " : "CRC-32 ") + hex(read.hash, m.format) +
                      " differs from the marker's " + hex(f.hash, m.format),
                  p);
  }
  return m;
}

}  // namespace dtrain::detail
