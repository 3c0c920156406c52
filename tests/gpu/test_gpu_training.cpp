// The gpu tier: training on one GPU matches the CPU and plain PyTorch rules: CUDA against CPU,
// the fused optimizers against the multi-tensor ones, bf16 and fp16 (loss scaling and its CUDA
// kernels), out-of-memory recovery with the caching allocator capped so that the GPU behaves
// like a small card, micro_batch: auto, GPT through the fused LayerNorm, pinned batches, uint8
// pixels standardized into bf16.
#include "data/pixels.h"
#include "gpu_support.h"

namespace dtrain::test {
namespace {

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
  p.mutable_grad() =
      at::full({3}, std::numeric_limits<float>::infinity(), at::TensorOptions().device(kGpu));
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
  EXPECT_NEAR(capped.summary.last_loss, free_run.summary.last_loss,
              1e-4 * std::fabs(free_run.summary.last_loss));
}

TEST(Gpu, MicroBatchAutoFitsAndPrints) {
  TrainRun r = train(kMlp, {"train.micro_batch=auto"}, kGpu);
  EXPECT_EQ(r.summary.micro_batch, 64);  // small model: the whole rank batch fits
}

TEST(Gpu, GptOnCudaMatchesCpuThroughTheFusedKernels) {
  // fp32 on both sides: the GPU's residual adds and LayerNorms run in the fused kernels (Note
  // [fused residual LayerNorm]) and its head and loss in chunks with their gradients (Note [fused
  // head and loss]), the CPU's in LibTorch's ops; and the GPU once more with the whole logits.
  const char* gpt = R"(
run: {dir: "", seed: 4, log_every: 0, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 2048, seq_len: 32}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [32], synthetic_classes: 2048,
       synthetic_size: 256, synthetic_test_size: 0, workers: 1}
train: {epochs: 1, max_steps: 8, global_batch: 16, optimizer: sgd, lr: 0.5, momentum: 0.9,
        eval: false, cuda_graph: off}
)";
  at::globalContext().setAllowTF32CuBLAS(false);
  TrainRun gpu = train(gpt, {}, kGpu);
  TrainRun whole = train(gpt, {"model.fused_head=false"}, kGpu);
  TrainRun cpu = train(gpt, {}, at::kCPU);
  TrainRun init = train(gpt, {"train.max_steps=1", "train.lr=1e-12"}, at::kCPU);
  ASSERT_GT(max_rel(cpu, init), 1e-3);
  EXPECT_LT(max_rel(gpu, cpu), 1e-4);
  EXPECT_LT(max_rel(gpu, whole), 1e-5);
}

// ---- loader: batches gathered into pinned memory equal ordinary ones ---------------------------
TEST(Gpu, PinnedGatherEqualsGather) {
  const at::Tensor x = at::randn({50, 3, 5, 5}), y = at::randint(0, 7, {50}, at::kLong);
  DataSpec spec;
  spec.input_shape = {3, 5, 5}, spec.num_classes = 7;
  TensorDataset ds(x, y, spec, "pinned-test");
  const std::vector<int64_t> idx = {4, 49, 0, 17, 17, 3};
  const Batch a = ds.get(idx), b = ds.get_pinned(idx);
  EXPECT_TRUE(b.inputs.is_pinned());
  EXPECT_TRUE(b.targets.is_pinned());
  EXPECT_TRUE(at::equal(a.inputs, b.inputs));
  EXPECT_TRUE(at::equal(a.targets, b.targets));
}

// ---- uint8 pixels straight into bf16 channels-last (a ResNet's inputs under autocast) ----------
TEST(Gpu, PixelsIntoBf16ChannelsLastAreTheFloatValuesRoundedOnce) {
  DataSpec spec;
  spec.input_shape = {3, 9, 7}, spec.num_classes = 10;
  spec.pixel_mean = {0.49, 0.48, 0.45};
  spec.pixel_std = {0.25, 0.24, 0.26};
  const detail::PixelNormalizer pixels(spec, kGpu);
  const at::Tensor u8 =
      at::randint(0, 256, {5, 3, 9, 7}, at::TensorOptions().dtype(at::kByte)).to(kGpu);
  const at::Tensor f = pixels(u8);
  const at::Tensor b = pixels(u8, at::kBFloat16, at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(f.scalar_type(), at::kFloat);
  EXPECT_EQ(b.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(b.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(b.equal(f.to(at::kBFloat16)));
  EXPECT_TRUE(pixels(u8, at::kFloat, at::MemoryFormat::ChannelsLast).equal(f));
}

}  // namespace
}  // namespace dtrain::test
