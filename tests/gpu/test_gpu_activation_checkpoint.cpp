// The gpu tier: activation checkpointing (train.activation_checkpointing, Note [activation
// checkpointing]) on CUDA. GPT's gradients through dtrain's fused kernels (residual LayerNorm,
// Linear, MLP epilogues, the chunked head and loss) with every block recomputed equal those
// without, in fp32 and under bf16 autocast, with dropout too (the device generator's state put
// back); the peak memory of a step is lower; the whole step captured in a CUDA graph with the
// recompute inside trains like eager steps, and dropout in recomputed blocks keeps the step out of
// graphs (refused by name with train.cuda_graph=on).
#include "cuda/graph.h"
#include "gpu_support.h"
#include "train/loss.h"

namespace dtrain::test {
namespace {

ModelConfig gpt_config(int64_t layers, int64_t embd, int64_t seq, int64_t vocab, double dropout) {
  ModelConfig c;
  c.name = "gpt";
  c.n_layer = layers;
  c.n_head = 4;
  c.n_embd = embd;
  c.vocab_size = vocab;
  c.seq_len = seq;
  c.dropout = dropout;
  return c;
}

DataSpec tokens(int64_t seq, int64_t vocab) {
  DataSpec s;
  s.input_shape = {seq};
  s.num_classes = vocab;
  s.input_dtype = at::kLong;
  return s;
}

std::shared_ptr<Model> gpt_on_gpu(const ModelConfig& c, ActivationCheckpointing mode) {
  at::manual_seed(7);
  auto m = make_model("gpt", c, tokens(c.seq_len, c.vocab_size));
  EXPECT_TRUE(m->set_activation_checkpointing(mode));
  m->to(kGpu);
  return m;
}

// One training forward and backward as the eager step runs it (autocast around forward and loss;
// the fused head and loss where they apply), the generators seeded alike.
void step(Model& m, const at::Tensor& idx, Precision precision) {
  at::manual_seed(3);
  at::Tensor loss;
  {
    AutocastGuard autocast(kGpu, precision);
    loss = detail::training_loss(LossKind::kCrossEntropy, m, idx, idx);
  }
  loss.backward();
}

double gradient_difference(Model& a, Model& b) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const at::Tensor ga = pa[i].value().grad(), gb = pb[i].value().grad();
    EXPECT_TRUE(ga.defined() && gb.defined()) << pa[i].key();
    if (!ga.defined() || !gb.defined()) continue;
    const double d = (ga - gb).norm().item<double>() / std::max(gb.norm().item<double>(), 1e-30);
    worst = std::max(worst, d);
  }
  return worst;
}

double checkpointed_against_plain(const ModelConfig& c, Precision precision) {
  at::globalContext().setAllowTF32CuBLAS(false);
  auto with = gpt_on_gpu(c, ActivationCheckpointing::kBlocks);
  auto without = gpt_on_gpu(c, ActivationCheckpointing::kOff);
  at::manual_seed(2);
  const at::Tensor idx = at::randint(c.vocab_size, {8, c.seq_len}, at::kLong).to(kGpu);
  step(*with, idx, precision);
  step(*without, idx, precision);
  return gradient_difference(*with, *without);
}

TEST(GpuActivationCheckpoint, GptFp32GradientsEqualThroughTheFusedKernels) {
  const double d = checkpointed_against_plain(gpt_config(3, 128, 64, 1024, 0.0), Precision::kFp32);
  std::printf("fp32 gradients, largest relative difference: %.3g\n", d);
  EXPECT_LT(d, 1e-5);
}

TEST(GpuActivationCheckpoint, GptBf16GradientsEqualThroughTheFusedKernels) {
  const double d = checkpointed_against_plain(gpt_config(3, 128, 64, 1024, 0.0), Precision::kBf16);
  std::printf("bf16 gradients, largest relative difference: %.3g\n", d);
  EXPECT_LT(d, 1e-2);
}

TEST(GpuActivationCheckpoint, GptDropoutRecomputesTheSameMasksOnTheGpu) {
  const double d = checkpointed_against_plain(gpt_config(3, 128, 64, 1024, 0.1), Precision::kFp32);
  std::printf("fp32 gradients with dropout, largest relative difference: %.3g\n", d);
  EXPECT_LT(d, 1e-5);
}

TEST(GpuActivationCheckpoint, GptStepPeakMemoryIsLower) {
  // 12 blocks of 512 wide, 8 x 512 tokens, bf16: the blocks' activations dominate the peak.
  const ModelConfig c = gpt_config(12, 512, 512, 4096, 0.0);
  at::manual_seed(2);
  const at::Tensor idx = at::randint(c.vocab_size, {8, c.seq_len}, at::kLong).to(kGpu);
  int64_t peak[2] = {0, 0};
  const ActivationCheckpointing modes[2] = {ActivationCheckpointing::kOff,
                                            ActivationCheckpointing::kBlocks};
  for (int k = 0; k < 2; ++k) {
    auto m = gpt_on_gpu(c, modes[k]);
    step(*m, idx, Precision::kBf16);  // warm-up: workspaces, gradients allocated
    detail::synchronize(kGpu);
    detail::reset_peak_memory(kGpu);
    const int64_t before = detail::memory_stats(kGpu).allocated;
    step(*m, idx, Precision::kBf16);
    detail::synchronize(kGpu);
    peak[k] = detail::memory_stats(kGpu).peak - before;
  }
  std::printf("peak of a step above the model and its gradients: off %.1f MiB, blocks %.1f MiB\n",
              peak[0] / 1048576.0, peak[1] / 1048576.0);
  EXPECT_LT(peak[1], peak[0] / 2);
}

const char* kGpt = R"(
run: {dir: "", seed: 4, log_every: 0, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 1024, seq_len: 32}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [32], synthetic_classes: 1024,
       synthetic_size: 512, synthetic_test_size: 0, workers: 1}
train: {epochs: 1, max_steps: 12, global_batch: 16, micro_batch: 8, optimizer: adamw, lr: 0.003,
        eval: false, activation_checkpointing: blocks}
)";

TEST(GpuActivationCheckpoint, CudaGraphWithTheRecomputeInsideMatchesEager) {
  // fp32 and bf16: forward, the recomputing backward (two micro-batches) and the optimizer in one
  // graph, against eager steps with and without checkpointing.
  expect_graph_matches_eager(kGpt, {}, 1e-5);
  expect_graph_matches_eager(kGpt, {"train.precision=bf16"}, 1e-4);
  at::globalContext().setAllowTF32CuBLAS(false);
  TrainRun plain =
      train(kGpt, {"train.activation_checkpointing=off", "train.cuda_graph=off"}, kGpu);
  TrainRun graph = train(kGpt, {"train.cuda_graph=on"}, kGpu);
  EXPECT_LT(max_rel(graph, plain), 1e-4);
}

TEST(GpuActivationCheckpoint, DropoutInRecomputedBlocksKeepsTheStepOutOfGraphs) {
  TrainRun r = train(kGpt, {"model.dropout=0.1"}, kGpu);  // train.cuda_graph: auto
  EXPECT_EQ(r.summary.step_mode, "eager");
  try {
    train(kGpt, {"model.dropout=0.1", "train.cuda_graph=on"}, kGpu);
    FAIL() << "train.cuda_graph=on with dropout in recomputed blocks was not refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("train.cuda_graph"), std::string::npos) << m;
    EXPECT_NE(m.find("train.activation_checkpointing"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace dtrain::test
