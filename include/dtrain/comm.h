// Communicator: collectives over the ranks of one job, on torch::Tensors.
// Invariants: count and dtype come from the tensor, never from a void* and a count; every rank
// calls the same collectives in the same order; a failed collective is a dtrain::Error (the
// caller aborts the job, so no peer is left waiting). Backends: MPI (CPU tensors; CUDA tensors
// are staged through host memory) in src/comm/mpi_comm.cpp, NCCL (CUDA tensors, own stream
// ordered by events) in src/comm/nccl_comm.cpp.
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// A collective in flight. wait() returns once the result may be used on the calling thread's
// current stream (NCCL: the caller's stream waits on an event; nothing blocks the host).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // In place on `t` (contiguous). kAvg divides by world() in the same pass where possible.
  virtual void all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  virtual std::unique_ptr<Work> all_reduce_async(at::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  virtual void broadcast(at::Tensor& t, int root = 0) = 0;
  // Returns a tensor of shape (world, *t.shape) holding every rank's `t`, in rank order.
  virtual at::Tensor all_gather(const at::Tensor& t) = 0;
  // Reduce-scatter with a count per rank: `input` (1-D, contiguous) holds sum(counts) values, the
  // ranks' segments one after another in rank order; the ranks' inputs are reduced and rank r
  // receives segment r of the result (counts[r] values) in `output` (1-D, contiguous, counts[r]
  // values, input's dtype and device; left alone where counts[r] is 0). `counts` is the same on
  // every rank. kAvg divides by world(). Each rank receives only its segment: one volume of the
  // input on the wire, where an all-reduce moves two. MPI: MPI_Reduce_scatter on the
  // communicator's thread; NCCL: one ncclReduce per segment to its rank, grouped, on the NCCL
  // stream. This default all-reduces a copy of the input (for communicators of tests).
  virtual std::unique_ptr<Work> reduce_scatter_async(const at::Tensor& input,
                                                     const std::vector<int64_t>& counts,
                                                     at::Tensor& output,
                                                     ReduceOp op = ReduceOp::kSum);
  // Rank `root` gets every rank's `t` (1-D, contiguous, the same dtype on every rank; the lengths
  // may differ), in rank order, as CPU tensors; the other ranks get an empty vector. This
  // default goes through all_gather (every rank receives every tensor, padded to the longest);
  // the MPI backend sends each rank's tensor to the root alone, in rounds of at most 256 MiB in
  // all (64 MiB per rank, less on more than 4 ranks).
  virtual std::vector<at::Tensor> gather(const at::Tensor& t, int root);
  virtual void barrier() = 0;

  // Abandons the work in flight so that no thread stays blocked in it (NCCL: ncclCommAbort);
  // afterwards every collective is a dtrain::Error. Safe from another thread (the watchdog
  // calls it before ending the job). MPI: nothing to do, MPI_Abort ends the job.
  virtual void abort() {}
  // The MPI communicator this one runs on (MPI backend), else MPI_COMM_NULL: for side channels
  // such as the watchdog's, which duplicate it.
  virtual MPI_Comm mpi_handle() const { return MPI_COMM_NULL; }
};

// MPI backend on `comm` (MPI_COMM_WORLD, MPI_COMM_SELF, or a split). The communicator is
// duplicated, so dtrain's traffic never mixes with the caller's.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

// NCCL backend over the ranks of `comm` (the unique id is broadcast with MPI) on CUDA device
// `device_index`. Throws dtrain::Error in a build without CUDA.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device_index);

// Every rank's string, in rank order (a collective over `comm`, CPU tensors: a control
// communicator).
std::vector<std::string> gather_strings(Communicator& comm, const std::string& s);

// Every rank's `failure` ("" for none), agreed (a collective): when any rank failed, every rank
// throws the same dtrain::AgreedError, "<what> failed on rank R: <R's message>" (R the first
// that did; "on every rank" when every rank of several failed with the same message), which the
// error policy prints once, from rank R, and ends the job without MPI_Abort.
void agree_no_failure(Communicator& comm, const std::string& failure, const std::string& what,
                      const std::string& where = {});
// Runs `body`, which makes no collective, on this rank, then agrees as above whether it threw
// on any rank: for an error a user acts on as it is (a data file, a batch too large for the
// data), so every rank throws an AgreedError with the first failing rank's message unchanged
// (its first line), followed by " (on every rank)" when every rank of several failed with the
// same message.
void agree_no_failure(Communicator& comm, const std::function<void()>& body);

}  // namespace dtrain
