// The CPUs this process may run on (util/cpus.h).
#include "util/cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace dtrain::detail {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

std::vector<int> affinity_cpu_list() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) out.push_back(i);
  return out;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace dtrain::detail
