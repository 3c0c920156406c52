// The `gpu` tier: needs a CUDA device. Without one it prints why and exits 77 (ctest: skipped).
// Covers: training on CUDA matches CPU; the NCCL backend (one rank), its abort() (an Error, not a
// hang) and the Reducer over it;
// mixed precision (bf16 autocast, fp16 loss scaling); out-of-memory recovery with the caching
// allocator capped so that the GPU behaves like a small card; the whole step captured in a CUDA
// graph trains exactly like eager steps; the profiler records GPU kernels.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "cuda/memory.h"
#include "cuda/fused_loss.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "dist/reducer.h"
#include "dtrain/runtime.h"
#include "dtrain/log.h"
#include "telemetry/profiler.h"
#include "dtrain/trainer.h"

#include <unistd.h>

namespace dtrain {
namespace {

const at::Device kGpu(at::kCUDA, 0);

struct TrainRun {
  std::vector<at::Tensor> params;  // on the CPU
  TrainSummary summary;
};

TrainRun train(const std::string& yaml, const std::vector<std::string>& overrides, at::Device dev,
          Communicator* comm_in = nullptr) {
  Config cfg = Config::from_string(yaml, "gpu-test", overrides);
  auto own = make_mpi_communicator(MPI_COMM_SELF);
  Communicator& comm = comm_in ? *comm_in : *own;
  cfg.resolve(comm.world());
  Splits data = make_datasets(cfg.data, cfg.run.seed);
  at::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  auto model = make_model(cfg.model.name, cfg.model, data.train->spec());
  Trainer trainer(cfg, comm, *own, dev, model, data.train, data.test);
  TrainRun r;
  r.summary = trainer.fit();
  for (const auto& p : model->parameters()) r.params.push_back(p.detach().cpu().clone());
  return r;
}

double max_rel(const TrainRun& a, const TrainRun& b) {
  double worst = 0;
  for (size_t i = 0; i < a.params.size(); ++i)
    worst = std::max(worst, (a.params[i] - b.params[i]).norm().item<double>() /
                                std::max(1e-12, b.params[i].norm().item<double>()));
  return worst;
}

const char* kMlp = R"(
run: {dir: "", seed: 5, log_every: 0, quiet: true}
model: {name: mlp, hidden: [64, 32]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 1024,
       synthetic_test_size: 256, synthetic_features: 20, synthetic_classes: 4, workers: 2}
train: {epochs: 1, max_steps: 20, global_batch: 64, optimizer: adamw, lr: 0.003}
)";

TEST(Gpu, TrainingOnCudaMatchesCpu) {
  at::globalContext().setAllowTF32CuBLAS(false);
  TrainRun gpu = train(kMlp, {}, kGpu);
  TrainRun cpu = train(kMlp, {}, at::kCPU);
  EXPECT_LT(max_rel(gpu, cpu), 1e-4);
  EXPECT_NEAR(gpu.summary.eval.accuracy, cpu.summary.eval.accuracy, 1.0 / 256 + 1e-9);
}

TEST(Gpu, FusedAdamWMatchesAdamW) {
  at::globalContext().setAllowTF32CuBLAS(false);
  std::vector<std::string> o = {"train.weight_decay=0.1"};
  TrainRun fused = train(kMlp, o, kGpu);
  o.push_back("train.fused_optimizer=false");
  TrainRun plain = train(kMlp, o, kGpu);
  EXPECT_LT(max_rel(fused, plain), 1e-5);
}

// The fused kernels honour SGD's Nesterov momentum and dampening (its first step in a launch of
// its own) and train.no_decay_norm_bias (a second launch with weight decay 0), in the captured
// CUDA graph too (one rank on CUDA: train.cuda_graph auto).
TEST(Gpu, FusedOptimizerOptionsMatchForeach) {
  at::globalContext().setAllowTF32CuBLAS(false);
  const std::vector<std::vector<std::string>> cases = {
      {"train.optimizer=sgd", "train.lr=0.05", "train.momentum=0.9", "train.nesterov=true",
       "train.weight_decay=0.01", "train.no_decay_norm_bias=true"},
      {"train.optimizer=sgd", "train.lr=0.05", "train.momentum=0.9", "train.dampening=0.5"},
      {"train.weight_decay=0.1", "train.no_decay_norm_bias=true"},
      {"train.optimizer=adam", "train.weight_decay=0.1", "train.no_decay_norm_bias=true"}};
  for (const auto& o : cases) {
    SCOPED_TRACE(o[0] + " " + o.back());
    TrainRun fused = train(kMlp, o, kGpu);
    std::vector<std::string> plain_o = o;
    plain_o.push_back("train.fused_optimizer=false");
    TrainRun plain = train(kMlp, plain_o, kGpu);
    EXPECT_LT(max_rel(fused, plain), 1e-5);
  }
}

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
  for (int i = 0; i < 5; ++i) ps.push_back(at::randn({128, 128}, at::TensorOptions().device(kGpu)).requires_grad_(true));
  ReducerOptions o;
  o.bucket_cap_bytes = 128 * 128 * 4;
  o.first_bucket_cap_bytes = 128 * 128 * 4;
  Reducer reducer(ps, {"a", "b", "c", "d", "e"}, *nccl, *cpu, o);
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
  // Note [reducer in the graph] holds: the bucket copies and every bucket's NCCL all-reduce captured
  // in the step's graph give the parameters of eager steps through the same engine.
  at::globalContext().setAllowTF32CuBLAS(false);
  auto nccl = make_nccl_communicator(MPI_COMM_WORLD, 0);
  const std::vector<std::string> o = {"dist.reduce_single_rank=true", "dist.bucket_cap_mb=0.002",
                                      "dist.first_bucket_mb=0.001", "train.micro_batch=16",
                                      "train.weight_decay=0.1", "train.clip_grad_norm=0.5"};
  std::vector<std::string> on = o, off = o;
  on.push_back("train.cuda_graph=on");
  off.push_back("train.cuda_graph=off");
  TrainRun graph = train(kMlp, on, kGpu, nccl.get());
  TrainRun eager = train(kMlp, off, kGpu, nccl.get());
  EXPECT_EQ(graph.summary.step_mode.rfind("CUDA graph", 0), 0u) << graph.summary.step_mode;
  EXPECT_EQ(eager.summary.step_mode, "eager");
  TrainRun init = train(kMlp, {"train.max_steps=1", "train.lr=1e-12", "train.cuda_graph=off"}, kGpu);
  ASSERT_GT(max_rel(eager, init), 1e-2);
  EXPECT_LT(max_rel(graph, eager), 1e-5);
  EXPECT_NEAR(graph.summary.last_loss, eager.summary.last_loss,
              1e-5 * std::max(1.0, std::fabs(eager.summary.last_loss)));
}

TEST(Gpu, Bf16TrainsCloseToFp32) {
  TrainRun fp32 = train(kMlp, {}, kGpu);
  TrainRun bf16 = train(kMlp, {"train.precision=bf16"}, kGpu);
  EXPECT_LT(max_rel(bf16, fp32), 5e-2);
  EXPECT_GT(bf16.summary.eval.accuracy, 0.5);
}

TEST(Gpu, Fp16WithLossScalingTrains) {
  TrainRun fp32 = train(kMlp, {}, kGpu);
  TrainRun fp16 = train(kMlp, {"train.precision=fp16"}, kGpu);
  EXPECT_LT(max_rel(fp16, fp32), 5e-2);
  EXPECT_EQ(fp16.summary.skipped_steps, 0);
}

TEST(Gpu, ScalerCudaKernelsFollowPyTorchsRule) {
  ScalerOptions o;
  o.growth_interval = 3;
  GradScaler s(kGpu, o);
  auto p = at::zeros({3}, at::TensorOptions().device(kGpu)).requires_grad_(true);
  p.mutable_grad() = at::full({3}, 65536.0, at::TensorOptions().device(kGpu));
  s.unscale({p});
  EXPECT_FALSE(s.found_inf());
  EXPECT_TRUE(p.grad().cpu().equal(at::ones({3})));
  s.update();
  p.mutable_grad() = at::full({3}, std::numeric_limits<float>::infinity(), at::TensorOptions().device(kGpu));
  s.unscale({p});
  EXPECT_TRUE(s.found_inf());
  s.update();
  EXPECT_DOUBLE_EQ(s.current_scale(), 32768.0);
  for (int i = 0; i < 3; ++i) {
    p.mutable_grad() = at::ones({3}, at::TensorOptions().device(kGpu));
    s.unscale({p});
    s.update();
  }
  EXPECT_DOUBLE_EQ(s.current_scale(), 65536.0);
}

TEST(Gpu, RealOutOfMemoryWithCappedAllocatorKeepsTheResult) {
  // Activations dominate: a full micro-batch needs much more memory than half of one.
  const char* big = R"(
run: {dir: "", seed: 9, log_every: 0, quiet: true}
model: {name: mlp, hidden: [4096, 4096, 4096]}
data: {format: synthetic, synthetic_task: classification, synthetic_size: 32768,
       synthetic_test_size: 0, synthetic_features: 1024, synthetic_classes: 10, workers: 1}
train: {epochs: 1, max_steps: 3, global_batch: 16384, optimizer: sgd, lr: 0.01, eval: false}
)";
  at::globalContext().setAllowTF32CuBLAS(false);
  detail::empty_cache(kGpu);
  detail::reset_peak_memory(kGpu);
  TrainRun free_run = train(big, {}, kGpu);
  const auto stats = detail::memory_stats(kGpu);
  ASSERT_GT(stats.total, 0);
  EXPECT_EQ(free_run.summary.oom_retries, 0);
  // Cap the allocator below what the full micro-batch needed.
  const double fraction = 0.7 * static_cast<double>(stats.peak) / static_cast<double>(stats.total);
  std::printf("uncapped peak %.2f GiB; capping the allocator at %.4f of %.1f GiB\n",
              stats.peak / 1073741824.0, fraction, stats.total / 1073741824.0);
  detail::empty_cache(kGpu);
  struct Uncap {  // the cap must not outlive this test, whatever happens in it
    ~Uncap() { detail::set_memory_fraction(kGpu, 1.0); }
  } uncap;
  TrainRun capped = train(big, {"run.gpu_memory_fraction=" + std::to_string(fraction)}, kGpu);
  EXPECT_GE(capped.summary.oom_retries, 1);
  EXPECT_LT(capped.summary.micro_batch, free_run.summary.micro_batch);
  EXPECT_LT(max_rel(capped, free_run), 1e-4);
  EXPECT_NEAR(capped.summary.last_loss, free_run.summary.last_loss, 1e-4 * std::fabs(free_run.summary.last_loss));
}

TEST(Gpu, MicroBatchAutoFitsAndPrints) {
  TrainRun r = train(kMlp, {"train.micro_batch=auto"}, kGpu);
  EXPECT_EQ(r.summary.micro_batch, 64);  // small model: the whole rank batch fits
}

// ---- CUDA graph of the whole step: same parameters as eager steps ----------------------------
void expect_graph_matches_eager(const std::string& yaml, const std::vector<std::string>& extra,
                                double tol) {
  at::globalContext().setAllowTF32CuBLAS(false);
  std::vector<std::string> on = extra, off = extra;
  on.push_back("train.cuda_graph=on");
  off.push_back("train.cuda_graph=off");
  TrainRun graph = train(yaml, on, kGpu);
  TrainRun eager = train(yaml, off, kGpu);
  EXPECT_EQ(graph.summary.step_mode.rfind("CUDA graph", 0), 0u) << graph.summary.step_mode;
  EXPECT_EQ(eager.summary.step_mode, "eager");
  // Training moved the parameters, or the comparison proves nothing.
  TrainRun init = train(yaml, {"train.max_steps=1", "train.lr=1e-12", "train.cuda_graph=off"}, kGpu);
  ASSERT_GT(max_rel(eager, init), 1e-2);
  EXPECT_LT(max_rel(graph, eager), tol);
  EXPECT_NEAR(graph.summary.last_loss, eager.summary.last_loss,
              tol * std::max(1.0, std::fabs(eager.summary.last_loss)));
}

TEST(Gpu, CudaGraphAdamWScheduleClipMicroBatchesMatchesEager) {
  // Warmup + cosine (the learning rate changes at every replay), clipping, 4 micro-batches.
  expect_graph_matches_eager(kMlp, {"train.weight_decay=0.1", "train.warmup_steps=5",
                                    "train.schedule=cosine", "train.clip_grad_norm=0.5",
                                    "train.micro_batch=16"}, 1e-5);
}

TEST(Gpu, CudaGraphSgdMomentumWithPartialLastBatchMatchesEager) {
  // 1000 samples / 64: every epoch ends with a 40-sample batch, run eagerly between replays.
  expect_graph_matches_eager(kMlp, {"train.optimizer=sgd", "train.momentum=0.9", "train.lr=0.05",
                                    "train.weight_decay=1e-4", "data.synthetic_size=1000",
                                    "train.drop_last=false", "train.max_steps=0", "train.epochs=2"},
                             1e-5);
}

TEST(Gpu, CudaGraphCnnBatchNormBf16MatchesEager) {
  const char* cnn = R"(
run: {dir: "", seed: 2, log_every: 0, quiet: true}
model: {name: resnet18, channels_last: true}
data: {format: synthetic, synthetic_task: images, synthetic_shape: [3, 32, 32], synthetic_classes: 10,
       synthetic_size: 256, synthetic_test_size: 64, workers: 2}
train: {epochs: 1, max_steps: 12, global_batch: 32, optimizer: sgd, lr: 0.02, momentum: 0.9,
        precision: bf16}
)";
  expect_graph_matches_eager(cnn, {}, 1e-4);
  // uint8 batches standardized inside the captured step, as eagerly (Note [uint8 pixels]).
  expect_graph_matches_eager(cnn, {"data.synthetic_uint8=true"}, 1e-4);
}

TEST(Gpu, CudaGraphGptBf16MatchesEager) {
  const char* gpt = R"(
run: {dir: "", seed: 4, log_every: 0, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 2048, seq_len: 32}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [32], synthetic_classes: 2048,
       synthetic_size: 512, synthetic_test_size: 64, workers: 2}
train: {epochs: 1, max_steps: 12, global_batch: 16, optimizer: adamw, lr: 0.001,
        weight_decay: 0.1, precision: bf16}
)";
  expect_graph_matches_eager(gpt, {}, 1e-4);
}

TEST(Gpu, GptOnCudaMatchesCpuThroughTheFusedLayerNorm) {
  // fp32 on both sides: the GPU's residual adds and LayerNorms run in the fused kernels (Note
  // [fused residual LayerNorm]), the CPU's in LibTorch's ops.
  const char* gpt = R"(
run: {dir: "", seed: 4, log_every: 0, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 512, seq_len: 32}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [32], synthetic_classes: 512,
       synthetic_size: 256, synthetic_test_size: 0, workers: 1}
train: {epochs: 1, max_steps: 8, global_batch: 16, optimizer: sgd, lr: 0.5, momentum: 0.9,
        eval: false, cuda_graph: off}
)";
  at::globalContext().setAllowTF32CuBLAS(false);
  TrainRun gpu = train(gpt, {}, kGpu);
  TrainRun cpu = train(gpt, {}, at::kCPU);
  TrainRun init = train(gpt, {"train.max_steps=1", "train.lr=1e-12"}, at::kCPU);
  ASSERT_GT(max_rel(cpu, init), 1e-3);
  EXPECT_LT(max_rel(gpu, cpu), 1e-4);
}

// ---- checkpoints: a bf16 GPT trained with the CUDA graph on, saved and resumed ---------------
TEST(Gpu, CheckpointOfABf16GptWithCudaGraphsResumesToTheSameResult) {
  const char* gpt = R"(
run: {seed: 4, log_every: 0, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 2048, seq_len: 32}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [32], synthetic_classes: 2048,
       synthetic_size: 512, synthetic_test_size: 64, workers: 2}
train: {epochs: 1, max_steps: 14, global_batch: 16, optimizer: adamw, lr: 0.001,
        weight_decay: 0.1, precision: bf16, eval: false}
checkpoint: {every_epoch: false}
)";
  char tmpl[] = "/tmp/dtrain-gpu-ckpt-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const TrainRun whole = train(gpt, {"run.dir=" + dir, "run.name=whole"}, kGpu);
  EXPECT_NE(whole.summary.step_mode.find("graph"), std::string::npos) << whole.summary.step_mode;
  // Saved after step 7 (past the graph's capture), resumed for the remaining 7 steps.
  const TrainRun first = train(gpt, {"run.dir=" + dir, "run.name=cut", "train.max_steps=7",
                                     "checkpoint.every_steps=7"}, kGpu);
  EXPECT_EQ(first.summary.checkpoint_step, 7);
  const TrainRun rest = train(gpt, {"run.dir=" + dir, "run.name=cut"}, kGpu);
  EXPECT_EQ(rest.summary.steps, 14);
  EXPECT_NE(rest.summary.step_mode.find("graph"), std::string::npos) << rest.summary.step_mode;
  EXPECT_LT(max_rel(rest, whole), 1e-4);
  std::system(("rm -rf " + dir).c_str());
}

// ---- loader: batches gathered into pinned memory equal ordinary ones ---------------------------
TEST(Gpu, PinnedGatherEqualsGather) {
  const at::Tensor x = at::randn({50, 3, 5, 5}), y = at::randint(0, 7, {50}, at::kLong);
  TensorDataset ds(x, y, DataSpec{{3, 5, 5}, 7, 0, at::kFloat}, "pinned-test");
  const std::vector<int64_t> idx = {4, 49, 0, 17, 17, 3};
  const Batch a = ds.get(idx), b = ds.get_pinned(idx);
  EXPECT_TRUE(b.inputs.is_pinned());
  EXPECT_TRUE(b.targets.is_pinned());
  EXPECT_TRUE(at::equal(a.inputs, b.inputs));
  EXPECT_TRUE(at::equal(a.targets, b.targets));
}

// ---- fused cross-entropy: the same loss and gradient as cross_entropy on fp32 logits -----------
TEST(Gpu, FusedCrossEntropyMatchesCrossEntropyOnFp32Logits) {
  at::manual_seed(7);
  const int64_t n = 96;
  // 5003: odd rows, element by element; 4096: rows of whole 16-byte vectors.
  for (int64_t v : {5003, 4096}) {
    for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      for (bool mean : {true, false}) {
        const at::Tensor base = (at::randn({n, v}, at::TensorOptions().device(kGpu)) * 3).to(dtype);
        const at::Tensor targets = at::randint(0, v, {n}, at::TensorOptions().device(kGpu).dtype(at::kLong));
        ASSERT_TRUE(detail::fused_cross_entropy_applies(base, targets));
        // Reference: PyTorch's cross_entropy on an fp32 copy, gradient cast back to `dtype`.
        at::Tensor a = base.detach().clone().requires_grad_(true);
        at::Tensor ref = at::cross_entropy_loss(a.to(at::kFloat), targets, {},
                                                mean ? at::Reduction::Mean : at::Reduction::Sum);
        (ref * 0.37).backward();
        at::Tensor b = base.detach().clone().requires_grad_(true);
        at::Tensor got = detail::fused_cross_entropy(b, targets, mean);
        (got * 0.37).backward();
        EXPECT_EQ(got.scalar_type(), at::kFloat);
        EXPECT_NEAR(got.item<double>(), ref.item<double>(), 1e-5 * std::fabs(ref.item<double>()))
            << at::toString(dtype) << " mean " << mean << " vocabulary " << v;
        const double tol = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 2e-3 : 1e-2;
        const double err = (a.grad().to(at::kFloat) - b.grad().to(at::kFloat)).abs().max().item<double>();
        const double scale = a.grad().to(at::kFloat).abs().max().item<double>();
        EXPECT_LT(err, tol * scale) << at::toString(dtype) << " mean " << mean << " vocabulary " << v;
        EXPECT_EQ(b.grad().scalar_type(), dtype);
      }
    }
  }
  // Small vocabularies and CPU tensors take the ordinary path.
  EXPECT_FALSE(detail::fused_cross_entropy_applies(at::zeros({4, 10}, at::TensorOptions().device(kGpu)),
                                                   at::zeros({4}, at::TensorOptions().device(kGpu).dtype(at::kLong))));
  EXPECT_FALSE(detail::fused_cross_entropy_applies(at::zeros({4, 4096}), at::zeros({4}, at::kLong)));
}

// With grad_in_logits the gradient lands in the logits' own memory, and the same values as
// into a new buffer (Model::loss_can_reuse_outputs).
TEST(Gpu, FusedCrossEntropyWritesTheGradientOverTheLogits) {
  at::manual_seed(11);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor base = at::randn({64, 4096}, at::TensorOptions().device(kGpu)).to(dtype);
    const at::Tensor targets = at::randint(0, 4096, {64}, at::TensorOptions().device(kGpu).dtype(at::kLong));
    at::Tensor a = base.clone().requires_grad_(true), b = base.clone().requires_grad_(true);
    at::Tensor la = a * 1.5, lb = b * 1.5;  // logits: outputs of an op, as a model's are
    la.retain_grad();
    detail::fused_cross_entropy(la, targets, /*mean=*/true, /*grad_in_logits=*/false).backward();
    const at::Tensor held = lb;  // the logits' memory, still referenced
    const void* memory = lb.data_ptr();
    detail::fused_cross_entropy(lb, targets, /*mean=*/true, /*grad_in_logits=*/true).backward();
    EXPECT_TRUE(at::equal(a.grad(), b.grad())) << at::toString(dtype);
    EXPECT_EQ(held.data_ptr(), memory);
    EXPECT_TRUE(at::equal(held, la.grad())) << "the logits now hold their gradient, " << at::toString(dtype);
    EXPECT_FALSE(at::equal(held, base * 1.5));
  }
}

TEST(Gpu, CudaGraphOnRefusedWithLossScalingNamesTheKey) {
  try {
    train(kMlp, {"train.cuda_graph=on", "train.precision=fp16"}, kGpu);
    FAIL() << "fp16 loss scaling cannot be captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.cuda_graph"), std::string::npos) << e.what();
  }
}

// ---- profiler: a Chrome trace of the recorded steps with their GPU kernels ----------------------
TEST(Gpu, ProfilerRecordsKernelsOfTheAskedSteps) {
  char dir[] = "/tmp/dtrain-gpu-prof-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (const char* mode : {"off", "on"}) {
    // A run directory each: a second run of one would resume the first's final checkpoint.
    TrainRun r = train(kMlp, {std::string("run.dir=") + dir, std::string("run.name=p_") + mode,
                              "run.profile_start=4", "run.profile_steps=3",
                              std::string("train.cuda_graph=") + mode},
                       kGpu);
    EXPECT_NE(r.summary.profile.find("kernels"), std::string::npos) << r.summary.profile;
    const ProfileSummary ps =
        summarize_trace(std::string(dir) + "/p_" + mode + "/trace.rank0.json");
    EXPECT_EQ(ps.steps, 3) << mode;
    EXPECT_GT(ps.kernels_per_step, 3) << mode << "\n" << ps.table;
    EXPECT_GT(ps.gpu_busy, 0.0) << mode;
    std::printf("cuda_graph=%s: %s", mode, ps.table.c_str());
  }
}

}  // namespace
}  // namespace dtrain

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  dtrain::log::configure(0, true);
  if (dtrain::cuda_device_count() == 0) {
    std::printf("gpu tests skipped: no CUDA device is visible%s\n",
                DTRAIN_WITH_CUDA ? "" : " (this dtrain was built without CUDA)");
    MPI_Finalize();
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
