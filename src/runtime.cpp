#include "dtrain/runtime.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/telemetry/log.h"

#if DTRAIN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

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
  if (run.device == "cuda" && gpus == 0)
    throw Error(std::string("run.device is cuda but no CUDA device is visible") +
                    (DTRAIN_WITH_CUDA ? "" : " (this dtrain was built without CUDA)"),
                "run.device");
  if ((run.device == "auto" || run.device == "cuda") && gpus > 0) {
    const int index = local_rank_ % gpus;
    if (local_world_ > gpus && local_rank_ == 0)
      log::warn(std::to_string(local_world_) + " ranks on " + host_ + " share " +
                std::to_string(gpus) + " GPU(s)");
#if DTRAIN_WITH_CUDA
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#endif
    device_ = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    // Shapes repeat every step: let cuDNN pick the fastest convolution algorithms once.
    at::globalContext().setBenchmarkCuDNN(true);
    at::globalContext().setAllowTF32CuBLAS(run.tf32);
  } else {
    device_ = at::Device(at::kCPU);
  }

  int threads = static_cast<int>(run.threads);
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, local_world_));
  }
  at::set_num_threads(threads);

  std::string backend = dist.backend;
  if (backend == "auto") backend = device_.is_cuda() ? "nccl" : "mpi";
  if (backend == "nccl" && !device_.is_cuda())
    throw Error("dist.backend is nccl but this rank computes on the CPU; use mpi", "dist.backend");
  cpu_comm_ = make_mpi_communicator(comm_);
  if (backend == "nccl")
    comm_backend_ = make_nccl_communicator(comm_, device_.index());
  else
    comm_backend_ = make_mpi_communicator(comm_);
}

Communicator& Runtime::comm() {
  if (!comm_backend_) throw Error("Runtime::comm() before setup()");
  return *comm_backend_;
}

Communicator& Runtime::cpu_comm() {
  if (!cpu_comm_) cpu_comm_ = make_mpi_communicator(comm_);
  return *cpu_comm_;
}

void Runtime::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// ---- Watchdog ------------------------------------------------------------------------------
Watchdog::Watchdog(double timeout_s, int rank)
    : timeout_s_(timeout_s), rank_(rank), last_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::beat(const char* phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  last_ = std::chrono::steady_clock::now();
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    const double idle =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
    if (idle > timeout_s_) {
      log::error("no progress for " + std::to_string(static_cast<int>(idle)) + " s in phase '" +
                 phase_ + "' (run.timeout_s = " + std::to_string(static_cast<int64_t>(timeout_s_)) +
                 "); a peer may have died or hung; aborting the job");
      MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);
    }
  }
}

}  // namespace dtrain
