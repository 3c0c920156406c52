#include "dtrain/runtime.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdlib>

#include "cuda/device.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "runtime/binding.h"
#include "runtime/cpu_binding.h"
#include "runtime/gpu_sharing.h"
#include "runtime/threads.h"

namespace dtrain {

int cuda_device_count() { return static_cast<int>(torch::cuda::device_count()); }

Runtime::Runtime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw Error("MPI_Init_thread failed: is this process started by mpirun/srun, or alone?");
    owns_mpi_ = true;
    if (provided < MPI_THREAD_MULTIPLE)
      throw Error("the MPI library provides thread level " + std::to_string(provided) +
                  "; dtrain needs MPI_THREAD_MULTIPLE (communication runs on its own thread)");
  }
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm_) != MPI_SUCCESS) throw Error("MPI_Comm_dup failed");
  init_facts();
}

Runtime::Runtime(MPI_Comm comm) {
  if (MPI_Comm_dup(comm, &comm_) != MPI_SUCCESS) throw Error("MPI_Comm_dup failed");
  init_facts();
}

void Runtime::init_facts() {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_);
  // Ranks that share memory share a node: their order there is the local rank. Works the same
  // under mpirun and srun, whatever environment variables the launcher sets.
  MPI_Comm local;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_world_);
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, static_cast<size_t>(len));
  detail::set_process_identity(rank_, host_);
}

Runtime::~Runtime() {
  comm_backend_.reset();
  cpu_comm_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (owns_mpi_ && !finalized) MPI_Finalize();
}

void Runtime::setup(const RunConfig& run, const DistConfig& dist) {
  const int gpus = cuda_device_count();
  if (run.device == DeviceKind::kCuda && gpus == 0)
    throw Error(std::string("run.device is cuda but no CUDA device is visible") +
                    (detail::built_with_cuda() ? "" : " (this dtrain was built without CUDA)"),
                "run.device");
  const int index = detail::device_for_rank(run.device, local_rank_, gpus);
  if (index >= 0) {
    if (local_world_ > gpus && local_rank_ == 0)
      log::warn(std::to_string(local_world_) + " ranks on " + host_ + " share " +
                std::to_string(gpus) + " GPU(s)");
    detail::set_current_device(index);
    device_ = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    // Shapes repeat every step: let cuDNN pick the fastest convolution algorithms once.
    at::globalContext().setBenchmarkCuDNN(true);
    at::globalContext().setAllowTF32CuBLAS(run.tf32);
  } else {
    device_ = at::Device(at::kCPU);
  }

  // Intra-op threads: from the CPUs this process may use, shared with the ranks of this node
  // that may use the same CPUs (runtime/threads.h).
  MPI_Comm node;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  const detail::NodeCpus cpus = detail::node_cpus(node);
  MPI_Comm_free(&node);
  const int mine = detail::affinity_cpus();
  const detail::ThreadChoice threads = detail::choose_threads(mine, cpus.sharing, run.threads);
  if (!threads.warning.empty()) log::warn(threads.warning);
  at::set_num_threads(threads.threads);
  log::detail("intra-op threads per rank: " + std::to_string(threads.threads) + " (" +
              threads.reason + ")");
  // The launcher's binding against the host (runtime/cpu_binding.h): said once per host.
  const detail::CpuBinding binding{
      rank_, host_,       mine, threads.threads, local_world_, cpus.used, detail::host_cpus(),
      srun_, cpus.sharing};
  detail::record_cpu_binding(binding);
  const std::string idle = detail::idle_cpus_advice(binding);
  if (!idle.empty() && local_rank_ == 0) log::warn(idle);

  Backend backend = dist.backend;
  if (backend == Backend::kAuto) backend = device_.is_cuda() ? Backend::kNccl : Backend::kMpi;
  if (backend == Backend::kNccl && !device_.is_cuda())
    throw Error("dist.backend is nccl but this rank computes on the CPU; use mpi", "dist.backend");
  cpu_comm_ = make_mpi_communicator(comm_);
  if (backend == Backend::kNccl) {
    // More ranks of this host than GPUs: NCCL needs each its own host identity, set before the
    // process's first NCCL call (Note [ranks sharing a GPU]).
    const detail::GpuSharing sharing =
        detail::gpu_sharing(rank_, host_, local_world_, gpus, local_world_ == world_);
    detail::apply_gpu_sharing(sharing);
    if (!sharing.note.empty() && local_rank_ == 0) log::warn(sharing.note);
    comm_backend_ = make_nccl_communicator(comm_, device_.index());
  } else {
    comm_backend_ = make_mpi_communicator(comm_);
  }
}

Communicator& Runtime::comm() {
  if (!comm_backend_) throw Error("Runtime::comm() before setup()");
  return *comm_backend_;
}

Communicator& Runtime::cpu_comm() {
  if (!cpu_comm_) cpu_comm_ = make_mpi_communicator(comm_);
  return *cpu_comm_;
}

void Runtime::abort_collectives() const noexcept {
  try {
    if (comm_backend_) comm_backend_->abort();
    if (cpu_comm_) cpu_comm_->abort();
  } catch (...) {
  }
}

}  // namespace dtrain
