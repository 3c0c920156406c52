// Runtime: the process's place in the job. Owns MPI (init/finalize, when it initialized it), the
// rank facts, the device this rank computes on, and the communicators. Created first in main
// (run_guarded does it), destroyed last. What is process-wide besides it: the logger's rank and
// quiet switch (log::configure; build_session sets them for each session), the rank and host
// every Error carries (set by each Runtime's constructor), the model registry (models.h) and the
// data-format registry (the formats dtrain registers, data/formats/registry.h), the stop signal
// the handlers record (install_stop_signals()), and what is set for the whole process from the
// config: by Runtime::setup LibTorch's intra-op thread count (run.threads), cuDNN's benchmark
// mode and TF32 for cuBLAS (run.tf32), by the Trainer the CUDA caching allocator's cap
// (run.gpu_memory_fraction); and the GPU JPEG decoders' memory counts (data.decode gpu).
// Invariants: ranks that share a node number themselves 0..local_world-1 in rank order, and rank
// r of a node binds GPU local_rank % GPUs when CUDA is present and run.device allows it, else
// the CPU; every rank reports the same world size (tests/dist/test_runtime.cpp).
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm.h"

namespace dtrain {

struct DistConfig;
struct RunConfig;

class Runtime {
 public:
  // Initializes MPI at thread level MULTIPLE (an Error when the library gives less), unless it
  // is initialized already; the destructor finalizes it when this did. Works under mpirun, srun
  // and as a single process with no launcher (world size 1). The job's ranks are
  // MPI_COMM_WORLD's, duplicated.
  Runtime(int* argc, char*** argv);
  // Use an MPI that someone else initialized (tests); `comm` is duplicated.
  explicit Runtime(MPI_Comm comm);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  int local_rank() const { return local_rank_; }
  int local_world() const { return local_world_; }
  const std::string& host() const { return host_; }
  MPI_Comm mpi_comm() const { return comm_; }

  // Pick the device (run.device: auto | cpu | cuda; run.device cuda without a GPU is an Error
  // naming the key), on a GPU turn on cuDNN's autotuning and set TF32 matmuls by run.tf32, set
  // intra-op threads, create communicators. `dist.backend` chooses the gradient communicator:
  // auto = NCCL on CUDA, MPI on CPU (nccl on a CPU rank is an Error naming the key). With NCCL
  // and more ranks on a host than GPUs, each rank first takes an NCCL host identity of its own
  // (Note [ranks sharing a GPU], runtime/gpu_sharing.h). Warns, once per host, when ranks share
  // GPUs and when the launcher's binding leaves at least half of the host's CPUs idle. A
  // collective (every rank calls it). It may be called again (dtrain bench does, once per
  // setting): both communicators are then made anew, and references to the earlier ones must be
  // gone by then.
  void setup(const RunConfig& run, const DistConfig& dist);

  const at::Device& device() const { return device_; }
  bool on_cuda() const { return device_.is_cuda(); }
  // Gradient / tensor communicator (NCCL or MPI); an Error before setup().
  Communicator& comm();
  // Always MPI, on CPU tensors: metrics, control messages, agreement checks. Before setup() it is
  // made on first use (agreements that come before it: dtrain bench's output check); setup()
  // makes it anew.
  Communicator& cpu_comm();

  // Checks the launcher's view of this process against MPI's: under mpirun OMPI_COMM_WORLD_SIZE,
  // _RANK and _LOCAL_RANK, else, in a task of an srun step, SLURM_STEP_NUM_TASKS (or, without
  // it, SLURM_NTASKS), SLURM_PROCID and SLURM_LOCALID must equal world(), rank() and
  // local_rank(). Throws dtrain::Error (both sets of numbers, and the fix) when they differ: a
  // broken MPI/PMI setup that would otherwise start N one-rank runs. `env` holds the values of
  // launcher_variables() that are set, read before MPI started (the `dtrain` program does so).
  // Called before setup(), it also tells setup() which launcher bound the CPUs: under srun the
  // binding is Slurm's allocation, so setup() says nothing of idle CPUs (runtime/cpu_binding.h).
  void check_launcher(const std::map<std::string, std::string>& env);
  // Whether check_launcher() saw a launcher that ends every rank when one exits with a non-zero
  // code (Open MPI's mpirun, by default): the error policy then ends a failing rank with a plain
  // exit instead of MPI_Abort and its banner. False until check_launcher() says otherwise.
  bool exit_ends_job() const { return exit_ends_job_; }
  static std::vector<std::string> launcher_variables();

  // Abandons the collectives in flight on this rank (NCCL: ncclCommAbort, after which the NCCL
  // communicator is unusable; the MPI backend does nothing) so that it can end without waiting
  // in one. The error policy (run_guarded) calls it before ending the job on an error of one
  // rank (then MPI_Abort).
  void abort_collectives() const noexcept;

 private:
  void init_facts();

  bool owns_mpi_ = false;
  bool srun_ = false;  // check_launcher() saw a task of an srun step
  bool exit_ends_job_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
  std::string host_;
  at::Device device_{at::kCPU};
  std::unique_ptr<Communicator> comm_backend_;
  std::unique_ptr<Communicator> cpu_comm_;
};

// Number of CUDA devices visible (0 in a CPU build).
int cuda_device_count();

// Makes SIGTERM, SIGUSR1 (Slurm's --signal) and SIGINT (Ctrl-C) ask every rank to stop at one
// step boundary (the next one with one rank; with several, the one after, once the ranks agreed:
// Note [hook requests]), write a checkpoint and end with exit_code() (dtrain/session.h); a second
// SIGINT ends the process at once. The dtrain command calls it; a C++ program may.
void install_stop_signals();

}  // namespace dtrain
