#include "dtrain/log.h"

#include <cstdio>
#include <mutex>

namespace dtrain::log {
namespace {
std::mutex g_mu;
int g_rank = 0;
bool g_quiet = false;

void emit(FILE* f, const std::string& prefix, const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "%s%s\n", prefix.c_str(), msg.c_str());
  std::fflush(f);
}
std::string rank_prefix() { return "[rank " + std::to_string(g_rank) + "] "; }
}  // namespace

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
