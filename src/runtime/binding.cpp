#include "runtime/binding.h"

#include <map>
#include <utility>

namespace dtrain::detail {

int device_for_rank(DeviceKind device, int local_rank, int gpus) {
  if (device == DeviceKind::kCpu || gpus <= 0) return -1;
  return local_rank % gpus;
}

std::string hosts_of_ranks(const std::vector<std::string>& host_of_rank, size_t max_hosts) {
  std::vector<std::string> order;  // hosts by their first rank
  std::map<std::string, std::vector<std::pair<int, int>>> ranges;
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    const int rank = static_cast<int>(r);
    auto& mine = ranges[host_of_rank[r]];
    if (mine.empty()) order.push_back(host_of_rank[r]);
    if (!mine.empty() && mine.back().second == rank - 1) {
      mine.back().second = rank;
    } else {
      mine.emplace_back(rank, rank);
    }
  }
  std::string out = std::to_string(order.size()) + (order.size() == 1 ? " host: " : " hosts: ");
  for (size_t h = 0; h < order.size() && h < max_hosts; ++h) {
    const auto& mine = ranges[order[h]];
    const bool one = mine.size() == 1 && mine[0].first == mine[0].second;
    out += (h ? ", " : "") + order[h] + (one ? " (rank " : " (ranks ");
    for (size_t k = 0; k < mine.size(); ++k) {
      out += (k ? ", " : "") + std::to_string(mine[k].first);
      if (mine[k].second > mine[k].first) out += "-" + std::to_string(mine[k].second);
    }
    out += ")";
  }
  if (order.size() > max_hosts)
    out += " ... and " + std::to_string(order.size() - max_hosts) +
           (order.size() - max_hosts == 1 ? " more host" : " more hosts");
  return out;
}

}  // namespace dtrain::detail
