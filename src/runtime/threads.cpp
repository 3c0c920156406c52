#include "runtime/threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace dtrain::detail {

ThreadChoice choose_threads(int affinity_cpus, int sharing_ranks, int64_t requested) {
  ThreadChoice c;
  const int cpus = std::max(1, affinity_cpus);
  const int ranks = std::max(1, sharing_ranks);
  const std::string mine = std::to_string(cpus) + " CPU(s) this process may use";
  if (requested <= 0) {
    c.threads = std::max(1, cpus / ranks);
    c.reason = "run.threads = 0: the " + mine + ", shared by " + std::to_string(ranks) +
               " rank(s) of this node";
  } else if (requested > cpus) {
    c.threads = cpus;
    c.warning = "run.threads = " + std::to_string(requested) + " is more than the " + mine +
                "; using " + std::to_string(cpus);
    c.reason = "run.threads = " + std::to_string(requested) + ", capped at the " + mine;
  } else {
    c.threads = static_cast<int>(requested);
    c.reason = "run.threads = " + std::to_string(requested);
  }
  return c;
}

NodeCpus node_cpus(MPI_Comm node) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &mine);
  }
  int n = 1;
  MPI_Comm_size(node, &n);
  std::vector<cpu_set_t> all(static_cast<size_t>(n));
  MPI_Allgather(&mine, sizeof(cpu_set_t), MPI_BYTE, all.data(), sizeof(cpu_set_t), MPI_BYTE, node);
  NodeCpus out;
  out.sharing = 0;
  cpu_set_t every;
  CPU_ZERO(&every);
  for (auto& other : all) {
    cpu_set_t both;
    CPU_AND(&both, &mine, &other);
    if (CPU_COUNT(&both) > 0) ++out.sharing;
    CPU_OR(&every, &every, &other);
  }
  out.sharing = std::max(1, out.sharing);
  out.used = std::max(1, CPU_COUNT(&every));
  return out;
}

}  // namespace dtrain::detail
