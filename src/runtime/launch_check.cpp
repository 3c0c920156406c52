// The launcher's view of this process against MPI's (Runtime::check_launcher, runtime.h).
//
// Who sets what: mpirun (Open MPI) gives each process OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK.
// srun gives each task SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS (and SLURM_STEP_NUM_TASKS) and
// the step id; its tasks join one MPI job only through PMI (srun --mpi=pmix or pmi2). Without it
// every task initializes MPI alone, as rank 0 of 1. Under mpirun inside an allocation the ranks
// inherit SLURM_* from the srun step that started Open MPI's daemons (SLURM_PROCID is then the
// daemon's, not the rank), so the OMPI_* variables, when present, win. The environment is read by
// the `dtrain` program before MPI_Init, so only what the launcher set is seen.
#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/launch_check.h"

#include <mpi.h>

#include "dtrain/error.h"
#include "dtrain/runtime.h"

namespace dtrain {
namespace {

using Env = std::map<std::string, std::string>;

std::optional<int64_t> number(const Env& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// A task of an srun step (not the batch script, the external or an interactive step: Slurm gives
// those ids from 0xfffffff0 up).
bool in_srun_step(const Env& env) {
  std::optional<int64_t> step = number(env, "SLURM_STEP_ID");
  if (!step) step = number(env, "SLURM_STEPID");
  return step && *step >= 0 && *step < 0xfffffff0LL && number(env, "SLURM_PROCID");
}

struct Facts {
  std::optional<int64_t> rank, world, local;
};

bool agrees(const Facts& launcher, int rank, int world, int local) {
  return (!launcher.rank || *launcher.rank == rank) &&
         (!launcher.world || *launcher.world == world) &&
         (!launcher.local || *launcher.local == local);
}

// A launcher's words for a mismatch between its facts and MPI's: its name, what it calls a
// process, what is wrong, where its facts come from, and how to start dtrain instead.
struct LauncherWords {
  const char* name;
  const char* unit;
  const char* setup;
  const char* variables;
  const char* fix;
};

const LauncherWords kMpirun = {
    "mpirun", "rank", "MPI", "OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK",
    "Start dtrain with the mpirun of the MPI it was built with (compare `mpirun --version` with "
    "`ldd dtrain | grep mpi`)"};
const LauncherWords kSrun = {
    "srun", "task", "MPI/PMI", "SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID",
    "Start dtrain with srun --mpi=pmix (or the PMI your Open MPI supports: srun --mpi=list; pmi2 "
    "on older setups), or with mpirun inside the allocation"};

// The launcher that started this process and its facts: mpirun (Open MPI's variables win, see
// above), a task of an srun step, or none (no words, no facts).
struct Launch {
  const LauncherWords* words = nullptr;
  Facts facts;
  std::string name() const { return words != nullptr ? words->name : "none"; }
};

Launch launch_of(const Env& env) {
  if (env.count("OMPI_COMM_WORLD_SIZE"))
    return {&kMpirun,
            {number(env, "OMPI_COMM_WORLD_RANK"), number(env, "OMPI_COMM_WORLD_SIZE"),
             number(env, "OMPI_COMM_WORLD_LOCAL_RANK")}};
  if (!in_srun_step(env)) return {};
  std::optional<int64_t> ntasks = number(env, "SLURM_STEP_NUM_TASKS");
  if (!ntasks) ntasks = number(env, "SLURM_NTASKS");
  return {&kSrun, {number(env, "SLURM_PROCID"), ntasks, number(env, "SLURM_LOCALID")}};
}

std::string show(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "?"; }

}  // namespace

std::vector<std::string> Runtime::launcher_variables() {
  return {"OMPI_COMM_WORLD_SIZE",
          "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_LOCAL_RANK",
          "SLURM_STEP_ID",
          "SLURM_STEPID",
          "SLURM_PROCID",
          "SLURM_LOCALID",
          "SLURM_NTASKS",
          "SLURM_STEP_NUM_TASKS",
          "PMIX_RANK",
          "PMI_RANK",
          "PMI_FD",
          "OMPI_MCA_orte_abort_on_non_zero_status"};
}

void Runtime::check_launcher(const std::map<std::string, std::string>& env) {
  srun_ = detail::launcher_name(env) == "srun";
  exit_ends_job_ = detail::launcher_ends_job_on_exit(env);
  detail::check_launch(env, rank_, world_, local_rank_);
}

void detail::check_launch(const std::map<std::string, std::string>& env, int rank_, int world_,
                          int local_rank_) {
  const Launch l = launch_of(env);
  if (l.words == nullptr || agrees(l.facts, rank_, world_, local_rank_)) return;
  const LauncherWords& w = *l.words;
  const std::string unit = w.unit;
  throw Error(std::string("the ") + w.setup + " setup is wrong: " + w.name +
              " started this process as " + unit + " " + show(l.facts.rank) + " of " +
              show(l.facts.world) + " (local " + unit + " " + show(l.facts.local) + "; " +
              w.variables + ") but MPI sees rank " + std::to_string(rank_) + " of " +
              std::to_string(world_) + " (local rank " + std::to_string(local_rank_) + "): the " +
              unit +
              "s did not join one MPI job and would each train alone, writing the same run "
              "directory. " +
              w.fix);
}

std::string detail::launch_error_before_mpi(const std::map<std::string, std::string>& env) {
#ifdef OPEN_MPI
  constexpr bool open_mpi = true;
#else
  constexpr bool open_mpi = false;
#endif
  const Launch srun = launch_of(env);
  if (!open_mpi || srun.words != &kSrun) return "";
  for (const char* pmi : {"PMIX_RANK", "PMI_RANK", "PMI_FD"})
    if (env.count(pmi)) return "";
  return "srun started this process as task " + show(srun.facts.rank) + " of " +
         show(srun.facts.world) +
         " without PMIx or PMI (srun --mpi=none, or a cluster whose MpiDefault is none), so the "
         "tasks cannot join one MPI job: Open MPI would stop in MPI_Init. Nothing was trained or "
         "written. Start dtrain with srun --mpi=pmix (srun --mpi=list shows what the cluster "
         "has; with launch/dtrain-slurm.sbatch set DTRAIN_SRUN_ARGS=--mpi=pmix), or with mpirun "
         "inside the allocation";
}

std::string detail::launcher_name(const std::map<std::string, std::string>& env) {
  return launch_of(env).name();
}

bool detail::launcher_ends_job_on_exit(const std::map<std::string, std::string>& env) {
  if (launcher_name(env) != "mpirun") return false;
  const auto it = env.find("OMPI_MCA_orte_abort_on_non_zero_status");
  if (it == env.end()) return true;
  std::string v = it->second;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return !(v == "0" || v == "false" || v == "no" || v == "off" || v == "f" || v == "n");
}

std::pair<int, int> detail::launcher_place(const std::map<std::string, std::string>& env) {
  const Facts f = launch_of(env).facts;
  const std::optional<int64_t> rank = f.rank, world = f.world;
  const bool known = rank && world && *world >= 1 && *rank >= 0 && *rank < *world &&
                     *world <= std::numeric_limits<int>::max();
  return known ? std::pair<int, int>{static_cast<int>(*rank), static_cast<int>(*world)}
               : std::pair<int, int>{0, 1};
}

std::string detail::launch_advice(const std::map<std::string, std::string>& env, int world) {
  if (world != 1 || launcher_name(env) != "none") return "";
  const std::optional<int64_t> ntasks = number(env, "SLURM_NTASKS");
  if (!ntasks || *ntasks <= 1) return "";
  return "Slurm's job has " + std::to_string(*ntasks) +
         " tasks (SLURM_NTASKS) but this process is not one of an srun step and MPI sees it "
         "alone: it trains as 1 rank. Inside the allocation start dtrain with srun (see "
         "launch/dtrain-slurm.sbatch) or mpirun";
}

}  // namespace dtrain
