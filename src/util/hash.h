// FNV-1a, 64 bit: the hash dtrain compares across ranks (configs, parameter signatures). Equal
// text gives an equal hash on every rank and every build. Pieces chain: fnv1a(b, fnv1a(a)) is
// fnv1a of a followed by b (a file hashed as it is read, in chunks).
#pragma once

#include <cstdint>
#include <string_view>

namespace dtrain::detail {

constexpr uint64_t kFnv1aStart = 1469598103934665603ull;

constexpr uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aStart) {
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace dtrain::detail
