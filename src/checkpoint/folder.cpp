#include "checkpoint/folder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "dtrain/error.h"
#include "util/dir.h"
#include "util/fs.h"
#include "util/hash.h"

namespace dtrain::detail {
namespace {

constexpr const char* kMarker = "COMPLETE";
constexpr const char* kPrefix = "step-";

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

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

uint64_t hash_bytes(const std::string& bytes) { return fnv1a(bytes); }

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

void write_marker(const std::string& checkpoint, int64_t step, int world,
                  const std::vector<std::string>& files) {
  nlohmann::json j;
  j["format"] = "dtrain checkpoint 1";
  j["step"] = step;
  j["world"] = world;
  j["files"] = nlohmann::json::array();
  for (const auto& f : files) {
    const std::string bytes = read_file(join_path(checkpoint, f));
    j["files"].push_back({{"name", f}, {"bytes", bytes.size()}, {"fnv1a", hex(hash_bytes(bytes))}});
  }
  write_file_atomic(join_path(checkpoint, kMarker), j.dump(1) + "\n");
  sync_dir(checkpoint);
}

Marker checked(const std::string& checkpoint) {
  const std::string path = join_path(checkpoint, kMarker);
  if (!is_dir(checkpoint)) throw Error("no such checkpoint folder", checkpoint);
  if (!path_exists(path))
    throw Error("incomplete checkpoint (no COMPLETE marker: its save did not finish); it is "
                "never loaded",
                checkpoint);
  Marker m;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(path));
    if (j.at("format").get<std::string>() != "dtrain checkpoint 1")
      throw Error("unknown checkpoint format '" + j.at("format").get<std::string>() + "'", path);
    m.step = j.at("step").get<int64_t>();
    m.world = j.at("world").get<int>();
    for (const auto& f : j.at("files")) {
      MarkedFile mf;
      mf.name = f.at("name").get<std::string>();
      mf.bytes = f.at("bytes").get<int64_t>();
      mf.hash = std::stoull(f.at("fnv1a").get<std::string>(), nullptr, 16);
      m.files.push_back(mf);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string("unreadable checkpoint marker: ") + e.what(), path);
  }
  for (const auto& f : m.files) {
    const std::string p = join_path(checkpoint, f.name);
    if (!path_exists(p)) throw Error("checkpoint file is missing", p);
    const std::string bytes = read_file(p);
    if (static_cast<int64_t>(bytes.size()) != f.bytes)
      throw Error("checkpoint file is truncated or changed: " + std::to_string(bytes.size()) +
                      " bytes, the marker says " + std::to_string(f.bytes),
                  p);
    if (hash_bytes(bytes) != f.hash)
      throw Error("checkpoint file is corrupt: its hash " + hex(hash_bytes(bytes)) +
                      " differs from the marker's " + hex(f.hash),
                  p);
  }
  return m;
}

}  // namespace dtrain::detail
