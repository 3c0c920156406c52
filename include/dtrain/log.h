// Logging: one line per message. info() and detail() speak for the job: rank 0 prints them on
// stdout as they are, without a prefix (detail() not with run.quiet). every(), warn() and error()
// print on whichever rank calls them, prefixed "[rank R] " (warn() and error() on stderr, with
// "warning: " and "error: " after the prefix).
// Invariants: lines from several threads never interleave within a line; a message first ends
// the live progress line (util/live_line.h), so it never lands on it.
#pragma once

#include <string>

namespace dtrain::log {

// This process's rank and run.quiet; until it is called, the process logs as rank 0.
void configure(int rank, bool quiet);
// While on, info(), detail() and every() print on stderr too: a command whose standard output is
// its result alone (`--json`) turns it on before anything is logged.
void keep_stdout_for_results(bool on);
void info(const std::string& msg);    // rank 0, stdout
void detail(const std::string& msg);  // rank 0, stdout, not in quiet mode (run.quiet)
void every(const std::string& msg);   // every rank, stdout, "[rank R] msg"
void warn(const std::string& msg);    // every rank that calls it, stderr, "[rank R] warning: msg"
void error(const std::string& msg);   // every rank that calls it, stderr, "[rank R] error: msg"

}  // namespace dtrain::log
