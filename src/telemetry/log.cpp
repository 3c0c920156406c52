#include "dtrain/log.h"

#include <cerrno>
#include <cstdio>
#include <mutex>

#include "telemetry/log_errors.h"

namespace dtrain::log {
namespace {
std::mutex g_mu;
int g_rank = 0;
bool g_quiet = false;

int g_stdout_errno = 0;

void emit(FILE* f, const std::string& prefix, const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_mu);
  errno = 0;
  const bool failed = std::fprintf(f, "%s%s\n", prefix.c_str(), msg.c_str()) < 0 || std::fflush(f) != 0;
  if (failed && f == stdout && g_stdout_errno == 0) g_stdout_errno = errno ? errno : EIO;
}
std::string rank_prefix() { return "[rank " + std::to_string(g_rank) + "] "; }
}  // namespace

int stdout_errno() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stdout_errno;
}

void configure(int rank, bool quiet) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rank = rank;
  g_quiet = quiet;
}
void info(const std::string& msg) {
  if (g_rank == 0) emit(stdout, "", msg);
}
void detail(const std::string& msg) {
  if (g_rank == 0 && !g_quiet) emit(stdout, "", msg);
}
void every(const std::string& msg) { emit(stdout, rank_prefix(), msg); }
void warn(const std::string& msg) { emit(stderr, rank_prefix() + "warning: ", msg); }
void error(const std::string& msg) { emit(stderr, rank_prefix() + "error: ", msg); }

}  // namespace dtrain::log
