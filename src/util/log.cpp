#include "dtrain/log.h"

#include <cerrno>
#include <cstdio>
#include <mutex>

#include "util/live_line.h"
#include "util/log_errors.h"

namespace dtrain::log {
namespace {
std::mutex g_mu;
int g_rank = 0;
bool g_quiet = false;
bool g_results_only = false;  // stdout holds a command's result alone: messages go to stderr

int g_stdout_errno = 0;
bool g_live = false;  // a live line is drawn on stdout, not yet ended by a newline

// Writes `text` to f and flushes it; a failure on stdout is remembered (stdout_errno).
void put(FILE* f, const char* text) {
  errno = 0;
  const bool failed = std::fputs(text, f) < 0 || std::fflush(f) != 0;
  if (failed && f == stdout && g_stdout_errno == 0) g_stdout_errno = errno ? errno : EIO;
}

// Ends a live line (the caller holds g_mu).
void end_live_locked() {
  if (!g_live) return;
  g_live = false;
  put(stdout, "\n");
}

void emit(FILE* f, const std::string& prefix, const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_mu);
  end_live_locked();  // a message never lands on, or under, the live line
  put(f, (prefix + msg + "\n").c_str());
}
std::string rank_prefix() { return "[rank " + std::to_string(g_rank) + "] "; }
// Where info(), detail() and every() print (set before anything is logged).
FILE* message_stream() { return g_results_only ? stderr : stdout; }
}  // namespace

int stdout_errno() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stdout_errno;
}

void draw_live(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mu);
  // Back to the line's start, the new text, then clear what a longer earlier text left.
  put(stdout, ("\r" + line + "\033[K").c_str());
  g_live = true;
}

void end_live() {
  std::lock_guard<std::mutex> lock(g_mu);
  end_live_locked();
}

void configure(int rank, bool quiet) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rank = rank;
  g_quiet = quiet;
}
void keep_stdout_for_results(bool on) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_results_only = on;
}
void info(const std::string& msg) {
  if (g_rank == 0) emit(message_stream(), "", msg);
}
void detail(const std::string& msg) {
  if (g_rank == 0 && !g_quiet) emit(message_stream(), "", msg);
}
void every(const std::string& msg) { emit(message_stream(), rank_prefix(), msg); }
void warn(const std::string& msg) { emit(stderr, rank_prefix() + "warning: ", msg); }
void error(const std::string& msg) { emit(stderr, rank_prefix() + "error: ", msg); }

}  // namespace dtrain::log
