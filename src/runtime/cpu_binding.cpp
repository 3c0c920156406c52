#include "runtime/cpu_binding.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>

namespace dtrain::detail {
namespace {

int used(const CpuBinding& b) {
  return b.node_used > 0 ? b.node_used : std::max(1, b.rank_cpus) * std::max(1, b.node_ranks);
}

// CPUs in a list as the kernel writes it ("0-3,8,10-11"); 0 when it does not read as one.
int count_cpu_list(const std::string& text) {
  int n = 0;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    part.erase(std::remove_if(part.begin(), part.end(), ::isspace), part.end());
    if (part.empty()) continue;
    try {
      const size_t dash = part.find('-');
      const int lo = std::stoi(part.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      if (hi < lo) return 0;
      n += hi - lo + 1;
    } catch (...) {
      return 0;
    }
  }
  return n;
}

// The CPUs this process's cgroup allows (v2: cpuset.cpus.effective of its group; v1: the cpuset
// controller's effective_cpus); 0 when there is none to read.
int cgroup_cpus() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::string file;
    if (controllers.empty())
      file = "/sys/fs/cgroup" + path + "/cpuset.cpus.effective";
    else if (controllers == "cpuset" || controllers.find("cpuset,") == 0)
      file = "/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus";
    else
      continue;
    std::ifstream in(file);
    std::string list;
    if (std::getline(in, list)) {
      const int n = count_cpu_list(list);
      if (n > 0) return n;
    }
  }
  return 0;
}

std::mutex recorded_mutex;
std::optional<CpuBinding> recorded;

}  // namespace

int idle_cpus(const CpuBinding& b) {
  if (b.srun || b.host_cpus <= 0) return 0;
  const int u = used(b);
  return u * 2 <= b.host_cpus ? b.host_cpus - u : 0;
}

std::string binding_fix(const CpuBinding& b) {
  const int ranks = std::max(1, b.node_ranks);
  return "with mpirun, --bind-to none or --map-by slot:PE=" +
         std::to_string(std::max(1, b.host_cpus / ranks)) + " gives each of the " +
         std::to_string(ranks) + " rank(s) more (launch/mpirun-local.sh does it)";
}

std::string idle_cpus_advice(const CpuBinding& b) {
  const int idle = idle_cpus(b);
  if (idle == 0) return "";
  return "rank " + std::to_string(b.rank) + " may use " + std::to_string(b.rank_cpus) + " of the " +
         std::to_string(b.host_cpus) + " CPUs of " + b.host +
         " (the launcher's binding), so it runs " + std::to_string(b.threads) +
         " intra-op thread(s) and its data.workers loader threads on them, and " +
         std::to_string(idle) + " CPUs stay idle; " + binding_fix(b);
}

int host_cpus() {
  const int online = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const int limit = cgroup_cpus();
  return limit > 0 ? std::min(online, limit) : online;
}

void record_cpu_binding(const CpuBinding& b) {
  std::lock_guard<std::mutex> lock(recorded_mutex);
  recorded = b;
}

std::optional<CpuBinding> recorded_cpu_binding() {
  std::lock_guard<std::mutex> lock(recorded_mutex);
  return recorded;
}

}  // namespace dtrain::detail
