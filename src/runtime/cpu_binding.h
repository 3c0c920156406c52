// The launcher's CPU binding against the host's CPUs: when the ranks of a host may together use
// at most half of the CPUs the job could have, the rest stay idle while each rank's loader and
// intra-op threads crowd onto its few. Open MPI does this by default: it binds each rank to one
// core when it starts 2 ranks or fewer (to a socket otherwise). The rule is one pure function
// (unit-tested), said by `dtrain env` (cli/env_hints.cpp), at the start of a run (Runtime::setup,
// once per host) and by the end-of-run diagnosis of a data-bound run (telemetry/diagnosis.h).
// Under srun the binding is Slurm's --cpus-per-task, chosen with the allocation: nothing to say.
#pragma once

#include <optional>
#include <string>

namespace dtrain::detail {

// One rank's view of its host.
struct CpuBinding {
  int rank = 0;
  std::string host;
  int rank_cpus = 0;   // CPUs in this rank's affinity mask
  int threads = 1;     // intra-op threads it runs
  int node_ranks = 1;  // the job's ranks on this host
  int node_used =
      0;  // CPUs in the union of their masks (0: unknown, taken as rank_cpus x node_ranks)
  int host_cpus = 0;  // CPUs of the host the job could use (host_cpus())
  bool srun = false;  // started by srun
  // Ranks of this host whose masks overlap this rank's, itself included: 1 when its CPUs are its
  // own (mpirun-local.sh's --map-by slot:PE=N, Open MPI's binding to a core each).
  int sharing = 1;
};

// The host's CPUs no rank of the job may use, when they are at least half of them; else 0.
int idle_cpus(const CpuBinding& b);
// What would give each rank more CPUs ("with mpirun, --bind-to none or --map-by slot:PE=8 ...").
std::string binding_fix(const CpuBinding& b);
// The advice with its numbers and binding_fix(); "" when idle_cpus() is 0.
std::string idle_cpus_advice(const CpuBinding& b);

// CPUs of this host the job could use: the online CPUs, or fewer where this process's cgroup
// limits them (a container, Slurm's task/cgroup: cpuset.cpus.effective).
int host_cpus();

// The binding Runtime::setup found for this process, kept for the end-of-run diagnosis (the
// report hook); nullopt before it ran.
void record_cpu_binding(const CpuBinding& b);
std::optional<CpuBinding> recorded_cpu_binding();

}  // namespace dtrain::detail
