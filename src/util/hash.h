// FNV-1a, 64 bit: the hash dtrain compares across ranks (configs, parameter signatures). Equal
// text gives an equal hash on every rank and every build.
#pragma once

#include <cstdint>
#include <string_view>

namespace dtrain::detail {

constexpr uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace dtrain::detail
