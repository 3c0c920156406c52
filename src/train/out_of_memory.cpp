// What an out-of-memory error is and how it reads (train/out_of_memory.h).
#include "train/out_of_memory.h"

#include <c10/util/Exception.h>

#include <cstring>

#include "util/format.h"

namespace dtrain::detail {

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const InjectedOutOfMemory*>(&e)) return true;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  if (dynamic_cast<const c10::Error*>(&e)) {
    const char* w = e.what();
    // LibTorch's CPU allocator says "can't allocate memory" (older ones "not enough memory").
    return std::strstr(w, "out of memory") || std::strstr(w, "not enough memory") ||
           std::strstr(w, "can't allocate memory");
  }
  return false;
}

std::string allocator_words(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string w = first_line(c10 ? c10->what_without_backtrace() : e.what());
  // LibTorch's CPU allocator: "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator:
  // ..."
  if (w.rfind("[enforce fail at ", 0) == 0) {
    const size_t check = w.find("] ");
    const size_t end = check == std::string::npos ? check : w.find(". ", check);
    if (end != std::string::npos) w = w.substr(end + 2);
  }
  const size_t tried = w.find("Tried to allocate");
  if (tried != std::string::npos) {
    const size_t end = w.find(". ", tried);
    if (end != std::string::npos) w = w.substr(0, end);
  }
  constexpr size_t kMost = 200;
  if (w.size() > kMost) w = w.substr(0, kMost) + "...";
  return w;
}

}  // namespace dtrain::detail
