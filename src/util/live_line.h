// The live progress line: one line on standard output redrawn in place, for a terminal. Every
// log line (info, detail, every, warn, error) first ends a drawn live line with a newline, so a
// message never lands on the live line and the next draw never covers a message.
#pragma once

#include <string>

namespace dtrain::log {

// Replaces the live line with `line` ("\r", the text, then clear to the end of the line; no
// newline). The caller decides whether this rank draws (rank 0, not quiet).
void draw_live(const std::string& line);
// Ends a drawn live line with a newline; nothing when none is drawn.
void end_live();

}  // namespace dtrain::log
