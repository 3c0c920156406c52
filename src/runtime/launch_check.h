// The check behind Runtime::check_launcher, as a pure function of the launcher's variables and
// MPI's numbers (unit-tested): throws dtrain::Error when they disagree. And what `dtrain env`
// says about the launcher from the same rules.
#pragma once

#include <map>
#include <string>
#include <utility>

namespace dtrain::detail {

void check_launch(const std::map<std::string, std::string>& env, int rank, int world,
                  int local_rank);

// Before MPI starts: a task of an srun step that srun gave no PMI of any kind (no PMIX_RANK,
// PMI_RANK or PMI_FD: `srun --mpi=none`, or a cluster whose MpiDefault is none) cannot join the
// step's other tasks in one MPI job, and Open MPI, which joins them through PMIx, stops inside
// MPI_Init with its own message. This says so first, naming the task and the fix; "" otherwise
// (and always for an MPI other than Open MPI).
std::string launch_error_before_mpi(const std::map<std::string, std::string>& env);

// Which launcher started this process: "mpirun" (Open MPI's variables), "srun" (a task of an
// srun step) or "none".
std::string launcher_name(const std::map<std::string, std::string>& env);

// Whether the launcher ends every rank of the job when one rank exits with a non-zero code:
// Open MPI's mpirun does (its orte_abort_on_non_zero_status, on unless
// OMPI_MCA_orte_abort_on_non_zero_status turns it off); srun only with --kill-on-bad-exit, which
// a rank cannot see, so never there. The error policy (session/error_policy.h) ends a failing
// rank with a plain exit where this holds, and with MPI_Abort where it does not.
bool launcher_ends_job_on_exit(const std::map<std::string, std::string>& env);

// This process's rank and the world size as the launcher gave them (mpirun's OMPI_COMM_WORLD_*,
// an srun step's SLURM_PROCID and task count), without MPI; {0, 1} with no launcher.
std::pair<int, int> launcher_place(const std::map<std::string, std::string>& env);

// Advice, not an error: Slurm's job has more than one task (SLURM_NTASKS > 1) but this process
// is no task of an srun step, no mpirun rank, and alone in MPI (a batch script that started
// dtrain without srun: it trains as one rank). "" otherwise.
std::string launch_advice(const std::map<std::string, std::string>& env, int world);

}  // namespace dtrain::detail
