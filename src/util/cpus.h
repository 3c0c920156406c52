// The CPUs this process may run on: its affinity mask (what mpirun --bind-to, srun --cpu-bind,
// taskset or a container allow), not the machine's cores. No MPI: the data formats ask it to
// size their decoding (runtime/threads.h builds the ranks' thread counts on it).
#pragma once

#include <string>
#include <vector>

namespace dtrain::detail {

// CPUs in this process's affinity mask (sched_getaffinity); the online CPUs if that fails.
int affinity_cpus();

// The CPUs in this process's affinity mask, ascending.
std::vector<int> affinity_cpu_list();
// CPU numbers as taskset and /proc write them: "0-3,8,10-11" ("" for none).
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace dtrain::detail
