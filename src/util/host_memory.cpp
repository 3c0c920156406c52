#include "util/host_memory.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <cmath>
#include <new>
#include <regex>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

std::string bytes_text(double bytes) {
  if (bytes >= 1e15) return format("%.3g bytes", bytes);
  return format("%.0f bytes (%s)", bytes, gib(static_cast<int64_t>(bytes)).c_str());
}

[[noreturn]] void out_of_memory(const std::string& what, const std::string& keys,
                                const std::string& asked, const std::string& remedy) {
  const int64_t total = host_memory_bytes();
  throw Error(what + " ran out of host memory" + (asked.empty() ? "" : " asking for " + asked) +
                  (total > 0 ? "; this machine has " + gib(total) : std::string()) + "; " + remedy,
              keys);
}

}  // namespace

int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

void check_host_bytes(double bytes, const std::string& what, const std::string& keys,
                      const std::string& remedy) {
  const int64_t total = host_memory_bytes();
  if (!std::isfinite(bytes) || bytes >= 9.2e18 || (total > 0 && bytes > static_cast<double>(total)))
    throw Error(what + " needs " + bytes_text(bytes) +
                    " of host memory, more than this machine's " +
                    (total > 0 ? gib(total) : std::string("memory")) + "; " + remedy,
                keys);
}

void guard_host_memory(const std::function<void()>& fn, const std::string& what,
                       const std::string& keys, const std::string& remedy) {
  try {
    fn();
  } catch (const std::bad_alloc&) {
    out_of_memory(what, keys, "", remedy);
  } catch (const c10::Error& e) {
    // LibTorch's CPU allocator: "DefaultCPUAllocator: can't allocate memory: you tried to
    // allocate 4000000000000 bytes. Error code 12 (Cannot allocate memory)".
    const std::string msg = e.what_without_backtrace();
    if (msg.find("can't allocate memory") == std::string::npos) throw;
    std::smatch m;
    std::string asked;
    if (std::regex_search(msg, m, std::regex("allocate ([0-9]+) bytes")))
      asked = bytes_text(std::stod(m[1].str()));
    out_of_memory(what, keys, asked, remedy);
  }
}

}  // namespace dtrain::detail
