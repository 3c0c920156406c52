// The fuzz tests' harness (test_fuzz_checkpoint.cpp, test_fuzz_data.cpp): a seeded mutator of
// bytes, and a runner that reads each mutated input in a child process under a time limit
// (alarm) and an address-space limit (RLIMIT_AS), so that a crash, a hang or an allocation
// without end fails the test instead of ending or stalling the suite. A case passes when the
// reader returns or throws a dtrain::Error with a message; anything else (another exception, a
// signal, the time limit, an empty message) is a failure that names the case and shows the
// input's mutations.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dtrain/error.h"

namespace dtrain::test {

// Mutations of a seed input, drawn from one std::mt19937_64: bit flips, random bytes, the
// integers that break size checks (0, 0xff, 0x7f, 0x80, 0xffffffff, 0x7fffffff, 2^31, as 1, 2, 4
// or 8 bytes), insertions, deletions, duplicated ranges, truncation. `describe` says what was
// done (for the failure message).
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // `seed` with 1 to 4 mutations; the first `keep` bytes are left alone (a header that would
  // otherwise hide the reader behind a format check).
  std::string mutate(const std::string& seed, size_t keep = 0) {
    std::string s = seed;
    describe_.clear();
    const int n = 1 + static_cast<int>(below(4));
    for (int k = 0; k < n; ++k) one(s, std::min(keep, s.size()));
    return s;
  }
  const std::string& describe() const { return describe_; }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  void one(std::string& s, size_t keep) {
    const size_t free = s.size() - keep;
    const size_t at = keep + below(free + 1);  // may be s.size() (an append or an empty range)
    char note[96];
    switch (below(8)) {
      case 0:  // flip one bit
        if (free == 0) break;
        {
          const size_t i = keep + below(free);
          const int bit = static_cast<int>(below(8));
          s[i] = static_cast<char>(s[i] ^ (1 << bit));
          std::snprintf(note, sizeof note, "flip bit %d of byte %zu; ", bit, i);
          describe_ += note;
        }
        break;
      case 1:
      case 2: {  // an integer that breaks size checks, as 1, 2, 4 or 8 bytes, either byte order
        static const uint64_t kValues[] = {0,
                                           0xff,
                                           0x7f,
                                           0x80,
                                           0xffffffffull,
                                           0x7fffffffull,
                                           0x80000000ull,
                                           0xffffffffffffffffull,
                                           0x10000,
                                           0x7fffffffffffffffull};
        const uint64_t v = kValues[below(sizeof kValues / sizeof kValues[0])];
        const size_t width = size_t(1) << below(4);
        const bool big = below(2) == 1;
        for (size_t b = 0; b < width && at + b < s.size(); ++b) {
          const size_t shift = 8 * (big ? width - 1 - b : b);
          s[at + b] = static_cast<char>((v >> shift) & 0xff);
        }
        std::snprintf(note, sizeof note, "write 0x%llx as %zu bytes (%s) at %zu; ",
                      static_cast<unsigned long long>(v), width, big ? "BE" : "LE", at);
        describe_ += note;
      } break;
      case 3: {  // random bytes over a short range
        const size_t len = 1 + below(8);
        for (size_t b = 0; b < len && at + b < s.size(); ++b)
          s[at + b] = static_cast<char>(below(256));
        std::snprintf(note, sizeof note, "randomize %zu bytes at %zu; ", len, at);
        describe_ += note;
      } break;
      case 4: {  // insert random bytes
        const size_t len = 1 + below(16);
        std::string ins(len, '\0');
        for (char& c : ins) c = static_cast<char>(below(256));
        s.insert(at, ins);
        std::snprintf(note, sizeof note, "insert %zu bytes at %zu; ", len, at);
        describe_ += note;
      } break;
      case 5: {  // delete a range
        const size_t len = std::min<size_t>(1 + below(32), s.size() - at);
        s.erase(at, len);
        std::snprintf(note, sizeof note, "delete %zu bytes at %zu; ", len, at);
        describe_ += note;
      } break;
      case 6: {  // duplicate a range in place
        const size_t len = std::min<size_t>(1 + below(64), s.size() - at);
        s.insert(at, s.substr(at, len));
        std::snprintf(note, sizeof note, "repeat %zu bytes at %zu; ", len, at);
        describe_ += note;
      } break;
      default:  // truncate
        s.resize(at);
        std::snprintf(note, sizeof note, "truncate to %zu bytes; ", at);
        describe_ += note;
    }
  }

  std::mt19937_64 rng_;
  std::string describe_;
};

enum class Outcome { kReturned, kError, kFailed };

struct CaseResult {
  Outcome outcome = Outcome::kFailed;
  std::string message;  // the Error's message, or what went wrong
};

// The limits of one case: seconds of wall time (alarm) and bytes of address space beyond what
// the process holds when it forks (LibTorch maps a lot before any case runs).
constexpr unsigned kCaseSeconds = 10;
constexpr uint64_t kCaseExtraBytes = uint64_t(2) << 30;

namespace detail {

// The child's side: limits, then each case in turn, its outcome written to `fd` as a code
// ('R' returned, 'E' a dtrain::Error, 'F' anything else), 4 bytes of length and the message.
[[noreturn]] inline void child(int fd, int first, int count, unsigned seconds,
                               const std::function<void(int)>& read_case) {
  at::set_num_threads(1);  // one thread here: LibTorch's loops must not wait for the parent's pool
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const uint64_t limit = static_cast<uint64_t>(pages) * ::sysconf(_SC_PAGESIZE) + kCaseExtraBytes;
  const rlimit as{limit, limit};
  ::setrlimit(RLIMIT_AS, &as);
  for (int c = first; c < first + count; ++c) {
    ::alarm(seconds);  // a case that does not end in time: SIGALRM ends the child
    std::string out;
    char code = 'F';
    try {
      read_case(c);
      code = 'R';
    } catch (const dtrain::Error& e) {
      code = 'E';
      out = e.what();
    } catch (const std::exception& e) {
      out = std::string("an exception that is not a dtrain::Error: ") + e.what();
    } catch (...) {
      out = "an exception that is not a std::exception";
    }
    const uint32_t n = static_cast<uint32_t>(out.size());
    std::string record(1, code);
    record.append(reinterpret_cast<const char*>(&n), 4);
    record += out;
    size_t done = 0;
    while (done < record.size()) {
      const ssize_t w = ::write(fd, record.data() + done, record.size() - done);
      if (w <= 0) ::_exit(3);
      done += static_cast<size_t>(w);
    }
  }
  ::_exit(0);
}

inline bool read_exactly(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace detail

// Runs cases [0, count) of `read_case` in child processes (many cases per child: a fork of a
// process holding LibTorch costs tens of milliseconds), each case under the time limit, the
// child under the address-space limit. A case that kills its child (a signal, the time limit)
// is a failure, and a new child goes on with the next case.
inline std::vector<CaseResult> run_cases(int count, const std::function<void(int)>& read_case,
                                         unsigned seconds = kCaseSeconds) {
  std::vector<CaseResult> results;
  while (static_cast<int>(results.size()) < count) {
    const int first = static_cast<int>(results.size());
    int fds[2];
    if (::pipe(fds) != 0) return results.push_back({Outcome::kFailed, "pipe failed"}), results;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return results.push_back({Outcome::kFailed, "fork failed"}), results;
    if (pid == 0) {
      ::close(fds[0]);
      detail::child(fds[1], first, count - first, seconds, read_case);
    }
    ::close(fds[1]);
    char head[5];
    while (detail::read_exactly(fds[0], head, 5)) {
      uint32_t n = 0;
      std::memcpy(&n, head + 1, 4);
      std::string msg(n, '\0');
      if (n > 0 && !detail::read_exactly(fds[0], msg.data(), n)) break;
      if (head[0] == 'R')
        results.push_back({Outcome::kReturned, ""});
      else if (head[0] == 'E' && !msg.empty())
        results.push_back({Outcome::kError, msg});
      else
        results.push_back(
            {Outcome::kFailed, msg.empty() ? "a dtrain::Error without a message" : msg});
    }
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (static_cast<int>(results.size()) < count &&
        !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      results.push_back(
          {Outcome::kFailed, sig == SIGALRM
                                 ? "no answer within " + std::to_string(seconds) + " s (a hang)"
                             : sig != 0 ? std::string("killed by signal ") + strsignal(sig)
                                        : "the child ended without an answer"});
    } else if (static_cast<int>(results.size()) < count) {
      results.push_back({Outcome::kFailed, "the child ended without an answer"});
    }
  }
  return results;
}

// One case alone (run_cases of one).
inline CaseResult run_case(const std::function<void()>& read, unsigned seconds = kCaseSeconds) {
  return run_cases(
             1, [&](int) { read(); }, seconds)
      .at(0);
}

// Counts of one format's cases.
struct FuzzTally {
  int returned = 0, errors = 0;
};

// `cases` mutations of `seed` (keeping its first `keep` bytes) drawn from `rng_seed`, each handed
// to `read`; a failure of any case fails the test, naming `what`, the case and its mutations.
inline FuzzTally fuzz(const std::string& what, uint64_t rng_seed, int cases,
                      const std::string& seed, size_t keep,
                      const std::function<void(const std::string&)>& read) {
  std::vector<std::string> inputs, notes;
  Mutator m(rng_seed);
  for (int c = 0; c < cases; ++c) {
    inputs.push_back(m.mutate(seed, keep));
    notes.push_back(m.describe());
  }
  const auto results = run_cases(cases, [&](int c) { read(inputs[static_cast<size_t>(c)]); });
  FuzzTally t;
  for (size_t c = 0; c < results.size(); ++c) {
    if (results[c].outcome == Outcome::kReturned) ++t.returned;
    if (results[c].outcome == Outcome::kError) ++t.errors;
    EXPECT_NE(results[c].outcome, Outcome::kFailed)
        << what << ", case " << c << " (seed " << rng_seed << "; " << notes[c]
        << "): " << results[c].message;
  }
  std::printf("%s: %d cases, %d read, %d ended in an Error\n", what.c_str(), cases, t.returned,
              t.errors);
  return t;
}

}  // namespace dtrain::test
