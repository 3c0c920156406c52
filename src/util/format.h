// Text for numbers and shapes, written one way everywhere in dtrain (logs, errors, reports).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::detail {

// printf-style formatting into a std::string: format("%.2f GiB", x).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// The shortest text that reads back as exactly `v` (the config dump round-trips through it);
// a whole number keeps a ".0" so that YAML reads it back as a float.
std::string exact_double(double v);
// A shape as "[9, 16]" (a scalar: "[]").
std::string shape_str(const std::vector<int64_t>& shape);
// The first line of a message (LibTorch's errors go on with a backtrace).
std::string first_line(const std::string& s);
// Bytes in GiB with two decimals: "9.91 GiB".
std::string gib(int64_t bytes);

}  // namespace dtrain::detail
