// The gpu tier: the NCCL backend with one rank: its collectives, abort() (an Error, not a hang),
// the Reducer over it, training through the gradient engine, and the engine captured in the
// step's CUDA graph (Note [reducer in the graph]). Several ranks: gpu.nccl.npN (tests/dist).
#include "gpu_support.h"

namespace dtrain::test {
namespace {

TEST(Gpu, NcclOneRankCollectives) {
  auto nccl = make_nccl_communicator(MPI_COMM_WORLD, 0);
  EXPECT_EQ(nccl->backend(), "nccl");
  at::Tensor t = at::arange(10, at::TensorOptions().device(kGpu).dtype(at::kFloat));
  nccl->all_reduce(t, ReduceOp::kSum);
  EXPECT_TRUE(t.cpu().equal(at::arange(10, at::kFloat)));
  nccl->all_reduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(t.cpu().equal(at::arange(10, at::kFloat)));
  at::Tensor b = at::full({4}, 3.0, at::TensorOptions().device(kGpu));
  nccl->broadcast(b, 0);
  at::Tensor g = nccl->all_gather(b);
  EXPECT_EQ(g.sizes(), (at::IntArrayRef{1, 4}));
  EXPECT_TRUE(g.cpu().equal(at::full({1, 4}, 3.0)));
  nccl->barrier();
  // Wrong device is a clear error, not a crash.
  at::Tensor host = at::ones({2});
  EXPECT_THROW(nccl->all_reduce(host), Error);
}

// The watchdog and the error policy call abort() so that no thread stays in a collective: from
// another thread while collectives run, it ends them with a dtrain::Error (no hang), and every
// later collective is an Error too.
TEST(Gpu, NcclAbortEndsCollectivesWithAnErrorNotAHang) {
  auto nccl = make_nccl_communicator(MPI_COMM_SELF, 0);
  at::Tensor t = at::ones({1 << 20}, at::TensorOptions().device(kGpu));
  nccl->all_reduce(t, ReduceOp::kSum);
  nccl->barrier();
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    nccl->abort();
  });
  bool threw = false;
  try {
    while (elapsed() < 30) {
      nccl->all_reduce(t, ReduceOp::kSum);
      nccl->barrier();
    }
  } catch (const Error&) {
    threw = true;
  }
  aborter.join();
  EXPECT_TRUE(threw) << "collectives went on for 30 s after abort()";
  EXPECT_LT(elapsed(), 10.0);
  EXPECT_THROW(nccl->all_reduce(t, ReduceOp::kSum), Error);
  EXPECT_THROW(nccl->barrier(), Error);
  nccl->abort();  // a second abort is harmless
}

TEST(Gpu, ReducerOverNcclKeepsGradients) {
  auto nccl = make_nccl_communicator(MPI_COMM_WORLD, 0);
  auto cpu = make_mpi_communicator(MPI_COMM_SELF);
  std::vector<at::Tensor> ps;
  for (int i = 0; i < 5; ++i)
    ps.push_back(at::randn({128, 128}, at::TensorOptions().device(kGpu)).requires_grad_(true));
  detail::ReducerOptions o;
  o.bucket_cap_bytes = 128 * 128 * 4;
  o.first_bucket_cap_bytes = 128 * 128 * 4;
  detail::Reducer reducer(ps, {"a", "b", "c", "d", "e"}, *nccl, *cpu, o);
  for (int step = 0; step < 2; ++step) {
    for (auto& p : ps) p.mutable_grad() = at::Tensor();
    reducer.prepare(true);
    at::Tensor x = at::randn({64, 128}, at::TensorOptions().device(kGpu));
    for (auto& p : ps) x = at::tanh(at::mm(x, p));
    x.sum().backward();
    std::vector<at::Tensor> local;
    for (auto& p : ps) local.push_back(p.grad().clone());
    reducer.finish();
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(ps[i].grad().equal(local[i])) << i;
  }
  EXPECT_EQ(reducer.rebuilds(), 1);
}

TEST(Gpu, TrainingThroughNcclGradientEngineMatchesCpu) {
  // The whole gradient engine on the GPU: hooks, buckets, NCCL all-reduce on its own stream.
  at::globalContext().setAllowTF32CuBLAS(false);
  auto nccl = make_nccl_communicator(MPI_COMM_WORLD, 0);
  const std::vector<std::string> o = {"dist.reduce_single_rank=true", "dist.bucket_cap_mb=0.002",
                                      "dist.first_bucket_mb=0.001", "train.micro_batch=16"};
  TrainRun gpu = train(kMlp, o, kGpu, nccl.get());
  TrainRun cpu = train(kMlp, {}, at::kCPU);
  EXPECT_LT(max_rel(gpu, cpu), 1e-4);
}

TEST(Gpu, CudaGraphWithTheNcclGradientEngineMatchesEager) {
  // Note [reducer in the graph] holds: the bucket copies and every bucket's NCCL all-reduce
  // captured in the step's graph give the parameters of eager steps through the same engine.
  at::globalContext().setAllowTF32CuBLAS(false);
  auto nccl = make_nccl_communicator(MPI_COMM_WORLD, 0);
  const std::vector<std::string> o = {"dist.reduce_single_rank=true", "dist.bucket_cap_mb=0.002",
                                      "dist.first_bucket_mb=0.001",   "train.micro_batch=16",
                                      "train.weight_decay=0.1",       "train.clip_grad_norm=0.5"};
  std::vector<std::string> on = o, off = o;
  on.push_back("train.cuda_graph=on");
  off.push_back("train.cuda_graph=off");
  TrainRun graph = train(kMlp, on, kGpu, nccl.get());
  TrainRun eager = train(kMlp, off, kGpu, nccl.get());
  EXPECT_EQ(graph.summary.step_mode.rfind("CUDA graph", 0), 0u) << graph.summary.step_mode;
  EXPECT_EQ(eager.summary.step_mode, "eager");
  TrainRun init =
      train(kMlp, {"train.max_steps=1", "train.lr=1e-12", "train.cuda_graph=off"}, kGpu);
  ASSERT_GT(max_rel(eager, init), 1e-2);
  EXPECT_LT(max_rel(graph, eager), 1e-5);
  EXPECT_NEAR(graph.summary.last_loss, eager.summary.last_loss,
              1e-5 * std::max(1.0, std::fabs(eager.summary.last_loss)));
}

}  // namespace
}  // namespace dtrain::test
