// NCCL backend of the Communicator (CUDA builds only). One NCCL communicator per job, its own
// high-priority CUDA stream; ordering with the compute stream is by events, never a device-wide
// synchronization. Tensors used on the communication stream are recorded on it so the caching
// allocator does not reuse them early.
//
// No rank waits in a collective forever (Note [NCCL never hangs the host]): the communicator is
// created non-blocking, every NCCL call is completed by polling ncclCommGetAsyncError (run()),
// and the host's own waits (barrier) poll the stream and the communicator's error state too. So
// a peer that fails surfaces here as a dtrain::Error (NCCL's remote or system error), and
// abort() (the watchdog, the error policy) unblocks whoever still waits: ncclCommAbort, then
// Errors.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "comm/collective_checks.h"
#include "cuda/check.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"

#define DTRAIN_NCCL_CHECK(call)                                                \
  do {                                                                         \
    ncclResult_t dtrain_nccl_rc_ = (call);                                     \
    if (dtrain_nccl_rc_ != ncclSuccess)                                        \
      throw ::dtrain::Error(std::string("NCCL call failed: ") + #call + ": " + \
                            ncclGetErrorString(dtrain_nccl_rc_));              \
  } while (0)

namespace dtrain {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    case at::kBool:
      return ncclUint8;
    default:
      throw Error(std::string("NCCL backend: unsupported dtype ") + at::toString(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<at::cuda::CUDAEvent> done, c10::DeviceIndex dev)
      : done_(std::move(done)), dev_(dev) {}
  void wait() override {
    // The caller's current stream waits for the collective; the host does not block.
    done_->block(c10::cuda::getCurrentCUDAStream(dev_));
  }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  c10::DeviceIndex dev_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, int device_index)
      : dev_(static_cast<c10::DeviceIndex>(device_index)),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, dev_)) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &world_);
    ncclUniqueId id;
    if (rank_ == 0) DTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm) != MPI_SUCCESS)
      throw Error("could not broadcast the NCCL unique id over MPI");
    c10::cuda::CUDAGuard guard(dev_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; run() polls for the result
    run("ncclCommInitRankConfig",
        [&] { return ncclCommInitRankConfig(&comm_, world_, id, rank_, &config); });
  }
  ~NcclCommunicator() override {
    if (!comm_ || aborted_.load()) return;
    // Abort (not destroy) when work may still be pending after an error: never blocks.
    if (std::uncaught_exceptions() > 0) {
      abort();
      return;
    }
    try {
      run(
          "ncclCommFinalize", [&] { return ncclCommFinalize(comm_); }, /*limit_s=*/60);
      std::lock_guard<std::mutex> lock(calls_);
      ncclCommDestroy(comm_);
    } catch (const Error&) {
      abort();
    }
  }

  // From any thread: the calls in progress are each one short non-blocking NCCL call (calls_),
  // and every wait checks aborted_ between its polls.
  void abort() override {
    if (aborted_.exchange(true)) return;
    std::lock_guard<std::mutex> lock(calls_);
    if (comm_) ncclCommAbort(comm_);
  }

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_reduce(at::Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }

  std::unique_ptr<Work> all_reduce_async(at::Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    auto stream = enter(t);
    run("ncclAllReduce", [&] {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                           nccl_op(op), comm_, stream);
    });
    return leave();
  }

  // One ncclReduce per non-empty segment, to the rank it belongs to, in one group: each rank
  // receives its own segment only, as a reduce-scatter with equal counts would.
  std::unique_ptr<Work> reduce_scatter_async(const at::Tensor& input,
                                             const std::vector<int64_t>& counts, at::Tensor& output,
                                             ReduceOp op) override {
    check(input, "reduce_scatter");
    detail::check_reduce_scatter(input, counts, output, rank_, world_);
    auto stream = enter(input);
    if (counts[static_cast<size_t>(rank_)] > 0)
      c10::cuda::CUDACachingAllocator::recordStream(output.storage().data_ptr(), stream_);
    const ncclDataType_t type = nccl_type(input.scalar_type());
    char* base = static_cast<char*>(input.data_ptr());
    const int64_t es = input.element_size();
    run("ncclReduce (reduce-scatter)", [&] {
      ncclResult_t first = ncclGroupStart();
      if (first != ncclSuccess) return first;
      int64_t offset = 0;
      for (int r = 0; r < world_; ++r) {
        const int64_t n = counts[static_cast<size_t>(r)];
        if (n == 0) continue;
        void* recv = r == rank_ ? output.data_ptr() : nullptr;
        const ncclResult_t rc = ncclReduce(base + offset * es, recv, static_cast<size_t>(n), type,
                                           nccl_op(op), r, comm_, stream);
        if (first == ncclSuccess && rc != ncclSuccess && rc != ncclInProgress) first = rc;
        offset += n;
      }
      const ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
    return leave();
  }

  void broadcast(at::Tensor& t, int root) override {
    check(t, "broadcast");
    auto stream = enter(t);
    run("ncclBroadcast", [&] {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root,
                           comm_, stream);
    });
    leave()->wait();
  }

  at::Tensor all_gather(const at::Tensor& t) override {
    check(t, "all_gather");
    std::vector<int64_t> shape{world_};
    for (auto d : t.sizes()) shape.push_back(d);
    at::Tensor out = at::empty(shape, t.options());
    auto stream = enter(t);
    c10::cuda::CUDACachingAllocator::recordStream(out.storage().data_ptr(), stream_);
    run("ncclAllGather", [&] {
      return ncclAllGather(t.data_ptr(), out.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                           comm_, stream);
    });
    leave()->wait();
    return out;
  }

  void barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().device(at::kCUDA, dev_));
    all_reduce(one, ReduceOp::kSum);
    wait_host(c10::cuda::getCurrentCUDAStream(dev_).stream(), "barrier");
  }

 private:
  // Note [NCCL never hangs the host]: a non-blocking communicator answers ncclInProgress until
  // the call (or an earlier one) is done; an error, a peer's included, is then the async error.
  // Polling also watches abort(), so the wait ends when the watchdog gives up.
  template <class F>
  void run(const char* call, F f, double limit_s = -1) {
    ncclResult_t rc;
    {
      std::lock_guard<std::mutex> lock(calls_);
      if (aborted_.load()) throw_aborted(call);
      rc = f();
    }
    const auto start = std::chrono::steady_clock::now();
    while (rc == ncclInProgress) {
      if (limit_s >= 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit_s)
        throw Error(std::string("NCCL call did not finish within ") +
                    std::to_string(static_cast<int>(limit_s)) + " s: " + call);
      std::this_thread::yield();
      std::lock_guard<std::mutex> lock(calls_);
      if (aborted_.load()) throw_aborted(call);
      if (ncclCommGetAsyncError(comm_, &rc) != ncclSuccess) break;
    }
    if (rc != ncclSuccess)
      throw Error(std::string("NCCL call failed: ") + call + ": " + ncclGetErrorString(rc) +
                  (rc == ncclRemoteError ? " (a peer rank failed or left)" : ""));
  }
  // The host waits for `stream` while checking the communicator: a collective that cannot finish
  // because a peer failed is an Error, not a hang.
  void wait_host(cudaStream_t stream, const char* what) {
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) DTRAIN_CUDA_CHECK(q);
      ncclResult_t rc = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(calls_);
        if (aborted_.load()) throw_aborted(what);
        ncclCommGetAsyncError(comm_, &rc);
      }
      if (rc != ncclSuccess && rc != ncclInProgress)
        throw Error(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(rc) +
                    (rc == ncclRemoteError ? " (a peer rank failed or left)" : ""));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  [[noreturn]] void throw_aborted(const char* what) const {
    throw Error(std::string("NCCL ") + what + ": the communicator was aborted (a rank failed or " +
                "the watchdog gave up); no further collectives on it");
  }

  void check(const at::Tensor& t, const char* what) const {
    if (aborted_.load()) throw_aborted(what);
    if (!t.defined() || !t.is_cuda() || t.device().index() != dev_)
      throw Error(std::string(what) + ": NCCL needs a tensor on cuda:" + std::to_string(dev_));
    if (!t.is_contiguous()) throw Error(std::string(what) + ": tensor must be contiguous");
  }
  // Order the communication stream after the producer (the caller's current stream).
  cudaStream_t enter(const at::Tensor& t) {
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(dev_));
    ready.block(stream_);
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    return stream_.stream();
  }
  std::unique_ptr<Work> leave() {
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(stream_);
    return std::make_unique<NcclWork>(std::move(done), dev_);
  }

  c10::DeviceIndex dev_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::mutex calls_;  // one NCCL call at a time on comm_, so abort() never races a call
  int rank_ = 0, world_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device_index) {
  return std::make_unique<NcclCommunicator>(comm, device_index);
}

}  // namespace dtrain
