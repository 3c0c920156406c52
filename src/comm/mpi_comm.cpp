// MPI backend of the Communicator: CPU tensors directly, CUDA tensors staged through host
// memory (dist.backend: mpi on GPUs, to debug NCCL or to compare with it). Also dtrain's control
// messages. bf16 and fp16 travel as 2-byte types with their own reduction operators.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/collective_checks.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"

#define DTRAIN_MPI_CHECK(call)                                                                   \
  do {                                                                                           \
    int dtrain_mpi_rc_ = (call);                                                                 \
    if (dtrain_mpi_rc_ != MPI_SUCCESS) ::dtrain::detail::throw_mpi_error(#call, dtrain_mpi_rc_); \
  } while (0)

namespace dtrain {
namespace detail {
[[noreturn]] void throw_mpi_error(const char* call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("MPI call failed: ") + call + ": " + std::string(msg, len));
}
}  // namespace detail

namespace {

template <class T, int kOp>  // 0 sum, 1 max, 2 min
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = static_cast<T>(kOp == 0 ? x + y : kOp == 1 ? std::max(x, y) : std::min(x, y));
  }
}

// 2-byte float types and their operators, created once per process (after MPI_Init).
struct HalfTypes {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL, fp16 = MPI_DATATYPE_NULL;
  MPI_Op bf16_ops[3], fp16_ops[3];
  HalfTypes() {
    DTRAIN_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bf16));
    DTRAIN_MPI_CHECK(MPI_Type_commit(&bf16));
    DTRAIN_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &fp16));
    DTRAIN_MPI_CHECK(MPI_Type_commit(&fp16));
    MPI_Op_create(&half_op<c10::BFloat16, 0>, 1, &bf16_ops[0]);
    MPI_Op_create(&half_op<c10::BFloat16, 1>, 1, &bf16_ops[1]);
    MPI_Op_create(&half_op<c10::BFloat16, 2>, 1, &bf16_ops[2]);
    MPI_Op_create(&half_op<c10::Half, 0>, 1, &fp16_ops[0]);
    MPI_Op_create(&half_op<c10::Half, 1>, 1, &fp16_ops[1]);
    MPI_Op_create(&half_op<c10::Half, 2>, 1, &fp16_ops[2]);
  }
};
const HalfTypes& half_types() {
  static HalfTypes t;  // intentionally never freed: MPI_Finalize releases them
  return t;
}

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kLong:
      return MPI_INT64_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kBool:
      return MPI_C_BOOL;
    case at::kBFloat16:
      return half_types().bf16;
    case at::kHalf:
      return half_types().fp16;
    default:
      throw Error(std::string("MPI backend: unsupported dtype ") + at::toString(t));
  }
}

MPI_Op mpi_op(ReduceOp op, at::ScalarType t) {
  int k = op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0;
  if (t == at::kBFloat16) return half_types().bf16_ops[k];
  if (t == at::kHalf) return half_types().fp16_ops[k];
  return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

void check_dense(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw Error(std::string(what) + ": undefined tensor");
  if (!t.is_contiguous()) throw Error(std::string(what) + ": tensor must be contiguous");
}

// Largest element count per MPI call (counts are int).
constexpr int64_t kChunk = INT_MAX / 2;

// A collective handed to the communicator's thread. wait() rethrows its error, then finishes
// on the caller's thread (the copy back to a CUDA tensor belongs to the caller's stream).
class MpiWork : public Work {
 public:
  MpiWork(std::shared_future<void> done, at::Tensor target, at::Tensor staged)
      : done_(std::move(done)), target_(std::move(target)), staged_(std::move(staged)) {}
  void wait() override {
    if (waited_) return;
    waited_ = true;
    done_.get();
    if (staged_.defined()) target_.copy_(staged_);
  }
  ~MpiWork() override {
    if (!waited_ && done_.valid()) done_.wait();  // never leave the thread writing freed memory
  }

 private:
  std::shared_future<void> done_;
  at::Tensor target_, staged_;
  bool waited_ = false;
};

// Every MPI call of one communicator runs on its own thread, in the order they were asked for.
// That gives real overlap (a blocking all-reduce proceeds while backward computes) and keeps the
// order of collectives identical on every rank, whichever thread asked.
class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) {
    DTRAIN_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    (void)half_types();
    thread_ = std::thread([this] { loop(); });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  std::string backend() const override { return "mpi"; }
  MPI_Comm mpi_handle() const override { return comm_; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_reduce(at::Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }

  std::unique_ptr<Work> all_reduce_async(at::Tensor& t, ReduceOp op) override {
    check_dense(t, "all_reduce");
    at::Tensor staged;
    if (!t.device().is_cpu()) staged = t.to(at::kCPU);  // synchronous copy to host
    at::Tensor buf = staged.defined() ? staged : t;
    if (op == ReduceOp::kAvg && !at::isFloatingType(buf.scalar_type()))
      throw Error("all_reduce: average needs a floating-point tensor");
    auto done = submit([this, buf, op]() mutable {
      if (world_ == 1) return;
      MPI_Datatype type = mpi_type(buf.scalar_type());
      MPI_Op mop = mpi_op(op, buf.scalar_type());
      char* base = static_cast<char*>(buf.data_ptr());
      const int64_t n = buf.numel(), es = buf.element_size();
      for (int64_t off = 0; off < n; off += kChunk) {
        int count = static_cast<int>(std::min(kChunk, n - off));
        DTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, base + off * es, count, type, mop, comm_));
      }
      if (op == ReduceOp::kAvg) buf.div_(static_cast<double>(world_));
    });
    return std::make_unique<MpiWork>(std::move(done), t, staged);
  }

  // Reduces on the host (a CUDA input is staged through it, and the segment copied back at
  // wait(), on the caller's stream), as MPI_Reduce_scatter over the communicator's thread.
  std::unique_ptr<Work> reduce_scatter_async(const at::Tensor& input,
                                             const std::vector<int64_t>& counts, at::Tensor& output,
                                             ReduceOp op) override {
    detail::check_reduce_scatter(input, counts, output, rank_, world_);
    if (input.numel() > kChunk)
      return Communicator::reduce_scatter_async(input, counts, output, op);
    if (op == ReduceOp::kAvg && !at::isFloatingType(input.scalar_type()))
      throw Error("reduce_scatter: average needs a floating-point tensor");
    const int64_t mine = counts[static_cast<size_t>(rank_)];
    const at::Tensor src = input.device().is_cpu() ? input : input.to(at::kCPU);
    at::Tensor staged;  // the segment on the host, when the output is not
    // MPI_Reduce_scatter's buffers may not overlap: an output inside the input (an in-place
    // segment, Note [gradient shard in the buckets]) gets its result through a copy too.
    if (mine > 0 && (!output.device().is_cpu() || output.is_alias_of(src)))
      staged = at::empty({mine}, src.options());
    at::Tensor dst = staged.defined() ? staged : mine > 0 ? output : at::empty({0}, src.options());
    std::vector<int> ints;
    for (int64_t c : counts) ints.push_back(static_cast<int>(c));
    auto done = submit([this, src, dst, ints, op]() mutable {
      MPI_Datatype type = mpi_type(src.scalar_type());
      DTRAIN_MPI_CHECK(MPI_Reduce_scatter(src.data_ptr(), dst.data_ptr(), ints.data(), type,
                                          mpi_op(op, src.scalar_type()), comm_));
      if (op == ReduceOp::kAvg && dst.numel() > 0) dst.div_(static_cast<double>(world_));
    });
    return std::make_unique<MpiWork>(std::move(done), output, staged);
  }

  void broadcast(at::Tensor& t, int root) override {
    check_dense(t, "broadcast");
    if (world_ == 1) return;
    at::Tensor buf = t.device().is_cpu() ? t : t.to(at::kCPU);
    submit([this, buf, root]() mutable {
      char* base = static_cast<char*>(buf.data_ptr());
      const int64_t n = buf.numel(), es = buf.element_size();
      for (int64_t off = 0; off < n; off += kChunk) {
        int count = static_cast<int>(std::min(kChunk, n - off));
        DTRAIN_MPI_CHECK(
            MPI_Bcast(base + off * es, count, mpi_type(buf.scalar_type()), root, comm_));
      }
    }).get();
    if (!t.device().is_cpu()) t.copy_(buf);
  }

  at::Tensor all_gather(const at::Tensor& t) override {
    check_dense(t, "all_gather");
    at::Tensor src = t.device().is_cpu() ? t : t.to(at::kCPU);
    std::vector<int64_t> shape{world_};
    for (auto d : src.sizes()) shape.push_back(d);
    at::Tensor out = at::empty(shape, src.options());
    if (src.numel() > kChunk) throw Error("all_gather: tensor too large for one MPI call");
    submit([this, src, out]() mutable {
      MPI_Datatype type = mpi_type(src.scalar_type());
      DTRAIN_MPI_CHECK(MPI_Allgather(src.data_ptr(), static_cast<int>(src.numel()), type,
                                     out.data_ptr(), static_cast<int>(src.numel()), type, comm_));
    }).get();
    return t.device().is_cpu() ? out : out.to(t.device());
  }

  // The lengths to the root, then the bytes in rounds: in round k each rank sends its bytes
  // [k C, (k + 1) C) (C = 64 MiB, 256 MiB / world on more than 4 ranks, or less when every
  // tensor is shorter; fewer or none at its end) with MPI_Gatherv into a buffer of C per rank on
  // the root, which copies them into place. No count or displacement passes an int, and the root
  // holds at most 256 MiB of one round beside the result.
  std::vector<at::Tensor> gather(const at::Tensor& t, int root) override {
    if (t.dim() != 1)
      throw Error("gather: needs a 1-D tensor, got " + std::to_string(t.dim()) + " dimensions");
    const at::Tensor src = t.to(at::kCPU).contiguous();
    const int64_t es = src.element_size();
    std::vector<at::Tensor> out;
    submit([this, src, root, es, &out]() {
      int64_t mine = src.numel();
      std::vector<int64_t> lengths(static_cast<size_t>(world_), 0);
      DTRAIN_MPI_CHECK(
          MPI_Gather(&mine, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, root, comm_));
      int64_t longest = 0;
      if (rank_ == root)
        for (int64_t n : lengths) longest = std::max(longest, n);
      DTRAIN_MPI_CHECK(MPI_Bcast(&longest, 1, MPI_INT64_T, root, comm_));
      if (rank_ == root)
        for (int64_t n : lengths) out.push_back(at::empty({n}, src.options()));
      // Bytes per rank per round: 64 MiB, less on many ranks (the root's buffer stays within
      // 256 MiB, its offsets within an int), or the longest tensor's when it is shorter.
      const int64_t cap =
          std::max<int64_t>(1, std::min<int64_t>(int64_t{64} << 20, (int64_t{256} << 20) / world_));
      const int64_t round = std::clamp<int64_t>(longest * es, 1, cap);
      std::unique_ptr<char[]> staged(rank_ == root ? new char[static_cast<size_t>(round * world_)]
                                                   : nullptr);
      std::vector<int> counts(static_cast<size_t>(world_)), displs(static_cast<size_t>(world_));
      const char* bytes = static_cast<const char*>(src.data_ptr());
      for (int64_t off = 0; off < longest * es; off += round) {
        auto count = [&](int64_t n) {
          return static_cast<int>(std::clamp<int64_t>(n * es - off, 0, round));
        };
        for (int r = 0; r < world_; ++r)
          counts[static_cast<size_t>(r)] = count(lengths[static_cast<size_t>(r)]),
          displs[static_cast<size_t>(r)] = static_cast<int>(r * round);
        DTRAIN_MPI_CHECK(MPI_Gatherv(bytes + std::min(off, mine * es), count(mine), MPI_BYTE,
                                     staged.get(), counts.data(), displs.data(), MPI_BYTE, root,
                                     comm_));
        if (rank_ != root) continue;
        for (int r = 0; r < world_; ++r)
          if (counts[static_cast<size_t>(r)] > 0)
            std::memcpy(static_cast<char*>(out[static_cast<size_t>(r)].data_ptr()) + off,
                        staged.get() + r * round,
                        static_cast<size_t>(counts[static_cast<size_t>(r)]));
      }
    }).get();
    return out;
  }

  void barrier() override {
    submit([this] { DTRAIN_MPI_CHECK(MPI_Barrier(comm_)); }).get();
  }

 private:
  std::shared_future<void> submit(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::shared_future<void> fut = task.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return fut;
  }
  void loop() {
    while (true) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // exceptions land in the future
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace dtrain
