// Logging: one line per message, prefixed with the rank. info() speaks for the job and prints on
// rank 0 only; warn() and error() print on whichever rank has something to say (stderr).
// Invariant: lines from several threads never interleave within a line.
#pragma once

#include <string>

namespace dtrain::log {

void configure(int rank, bool quiet);
void info(const std::string& msg);     // rank 0, stdout
void detail(const std::string& msg);   // rank 0, stdout, not in quiet mode
void every(const std::string& msg);    // every rank, stdout, "[rank R] msg"
void warn(const std::string& msg);     // every rank that calls it, stderr
void error(const std::string& msg);    // every rank that calls it, stderr

}  // namespace dtrain::log
