#include "session/rank_data.h"

#include <cstddef>
#include <map>

namespace dtrain::detail {

std::vector<std::string> data_differences(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  if (lines.size() < 2) return out;
  // The ranks of each line other than rank 0's, in order of their first rank.
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> ranks;
  for (size_t r = 1; r < lines.size(); ++r) {
    if (lines[r] == lines[0]) continue;
    auto& list = ranks[lines[r]];
    if (list.empty()) order.push_back(lines[r]);
    list.push_back(r);
  }
  for (const std::string& line : order) {
    const std::vector<size_t>& rs = ranks[line];
    std::string names;
    for (size_t k = 0; k < rs.size(); ++k)
      names += (k == 0 ? "" : k + 1 == rs.size() ? " and " : ", ") + std::to_string(rs[k]);
    const std::string who = (rs.size() == 1 ? "rank " : "ranks ") + names;
    out.push_back("the data of " + who + " differs from rank 0's: " + who + ": " + line +
                  "; rank 0: " + lines[0]);
  }
  return out;
}

}  // namespace dtrain::detail
