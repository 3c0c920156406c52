// The gpu tier: the whole step captured in a CUDA graph trains exactly like eager steps (AdamW
// with a schedule, clipping and micro-batches, SGD with a partial last batch, a bf16 CNN with
// BatchNorm, a bf16 GPT), survives a checkpoint and resume, and is refused by name where it
// cannot run.
#include "gpu_support.h"
#include "util/dir.h"

namespace dtrain::test {
namespace {

TEST(Gpu, CudaGraphAdamWScheduleClipMicroBatchesMatchesEager) {
  // Warmup + cosine (the learning rate changes at every replay), clipping, 4 micro-batches.
  expect_graph_matches_eager(
      kMlp,
      {"train.weight_decay=0.1", "train.warmup_steps=5", "train.schedule=cosine",
       "train.clip_grad_norm=0.5", "train.micro_batch=16"},
      1e-5);
}

TEST(Gpu, CudaGraphSgdMomentumWithPartialLastBatchMatchesEager) {
  // 1000 samples / 64: every epoch ends with a 40-sample batch, run eagerly between replays.
  expect_graph_matches_eager(
      kMlp,
      {"train.optimizer=sgd", "train.momentum=0.9", "train.lr=0.05", "train.weight_decay=1e-4",
       "data.synthetic_size=1000", "train.drop_last=false", "train.max_steps=0", "train.epochs=2"},
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
  const TrainRun first = train(
      gpt, {"run.dir=" + dir, "run.name=cut", "train.max_steps=7", "checkpoint.every_steps=7"},
      kGpu);
  EXPECT_EQ(first.summary.checkpoint_step, 7);
  const TrainRun rest = train(gpt, {"run.dir=" + dir, "run.name=cut"}, kGpu);
  EXPECT_EQ(rest.summary.steps, 14);
  EXPECT_NE(rest.summary.step_mode.find("graph"), std::string::npos) << rest.summary.step_mode;
  EXPECT_LT(max_rel(rest, whole), 1e-4);
  detail::remove_tree(dir);
}

TEST(Gpu, CudaGraphOnRefusedWithLossScalingNamesTheKey) {
  try {
    train(kMlp, {"train.cuda_graph=on", "train.precision=fp16"}, kGpu);
    FAIL() << "fp16 loss scaling cannot be captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.cuda_graph"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::test
