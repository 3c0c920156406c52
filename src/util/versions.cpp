#include "util/versions.h"

namespace dtrain::detail {
namespace {

std::string dotted(long major, long minor, long patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

std::string cuda_version_text(int v) {
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string cudnn_version_text(long v) {
  if (v <= 0) return "";
  if (v >= 90000) return dotted(v / 10000, v % 10000 / 100, v % 100);
  return dotted(v / 1000, v % 1000 / 100, v % 100);
}

std::string nccl_version_text(int v) {
  if (v <= 0) return "";
  if (v >= 20900) return dotted(v / 10000, v % 10000 / 100, v % 100);
  return dotted(v / 1000, v % 1000 / 100, v % 100);
}

}  // namespace dtrain::detail
