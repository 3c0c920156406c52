// NCCL backend of the Communicator (CUDA builds only). One NCCL communicator per job, its own
// high-priority CUDA stream; ordering with the compute stream is by events, never a device-wide
// synchronization. Tensors used on the communication stream are recorded on it so the caching
// allocator does not reuse them early.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "cuda/check.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"

#define DTRAIN_NCCL_CHECK(call)                                                            \
  do {                                                                                     \
    ncclResult_t dtrain_nccl_rc_ = (call);                                                 \
    if (dtrain_nccl_rc_ != ncclSuccess)                                                    \
      throw ::dtrain::Error(std::string("NCCL call failed: ") + #call + ": " +             \
                            ncclGetErrorString(dtrain_nccl_rc_));                          \
  } while (0)

namespace dtrain {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kBool: return ncclUint8;
    default: throw Error(std::string("NCCL backend: unsupported dtype ") + at::toString(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
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
    DTRAIN_NCCL_CHECK(ncclCommInitRank(&comm_, world_, id, rank_));
  }
  ~NcclCommunicator() override {
    if (comm_) {
      // Abort (not destroy) when work may still be pending after an error: never blocks.
      if (std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
      else ncclCommDestroy(comm_);
    }
  }

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_reduce(at::Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }

  std::unique_ptr<Work> all_reduce_async(at::Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    auto stream = enter(t);
    DTRAIN_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(),
                                    nccl_type(t.scalar_type()), nccl_op(op), comm_, stream));
    return leave();
  }

  void broadcast(at::Tensor& t, int root) override {
    check(t, "broadcast");
    auto stream = enter(t);
    DTRAIN_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(),
                                    nccl_type(t.scalar_type()), root, comm_, stream));
    leave()->wait();
  }

  at::Tensor all_gather(const at::Tensor& t) override {
    check(t, "all_gather");
    std::vector<int64_t> shape{world_};
    for (auto d : t.sizes()) shape.push_back(d);
    at::Tensor out = at::empty(shape, t.options());
    auto stream = enter(t);
    c10::cuda::CUDACachingAllocator::recordStream(out.storage().data_ptr(), stream_);
    DTRAIN_NCCL_CHECK(ncclAllGather(t.data_ptr(), out.data_ptr(), t.numel(),
                                    nccl_type(t.scalar_type()), comm_, stream));
    leave()->wait();
    return out;
  }

  void barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().device(at::kCUDA, dev_));
    all_reduce(one, ReduceOp::kSum);
    DTRAIN_CUDA_CHECK(cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream(dev_).stream()));
  }

 private:
  void check(const at::Tensor& t, const char* what) const {
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
  int rank_ = 0, world_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device_index) {
  return std::make_unique<NcclCommunicator>(comm, device_index);
}

}  // namespace dtrain
