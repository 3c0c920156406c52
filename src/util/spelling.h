// Did-you-mean for names a user typed: a config key, a subcommand, a model name. One rule for
// all: the closest candidate by edit distance, if it is close enough to be a typing slip.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace dtrain::detail {

// Levenshtein distance: insertions, deletions and substitutions of one character each.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` at a distance below `limit` (the first of equals), else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates,
                    size_t limit = 4);

}  // namespace dtrain::detail
