// How many intra-op threads a rank uses (run.threads). The CPUs a process may run on are its
// affinity mask (what mpirun --bind-to, srun --cpu-bind, taskset or a container allow), not the
// machine's cores; ranks of one node whose masks overlap share those CPUs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/cpus.h"  // affinity_cpus(), the CPUs a process may use

namespace dtrain::detail {

struct ThreadChoice {
  int threads = 1;
  std::string warning;  // non-empty when run.threads asked for more than the CPUs allow
  std::string reason;   // for the start-up log: how the count was chosen
};

// The rule: run.threads = 0 -> the CPUs this process may use divided among the ranks that share
// them (at least 1); run.threads = N -> N, capped at those CPUs, with a warning when capped.
ThreadChoice choose_threads(int affinity_cpus, int sharing_ranks, int64_t requested);

// The CPUs of one node (ranks sharing memory) as its ranks' affinity masks give them out.
struct NodeCpus {
  int sharing = 1;  // ranks whose masks overlap this rank's, this one included
  int used = 1;     // CPUs in the union of every rank's mask
};
// A collective over `node`.
NodeCpus node_cpus(MPI_Comm node);

}  // namespace dtrain::detail
