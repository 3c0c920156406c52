// Checkpoints written in the background on a GPU (checkpoint.async, Note [background saves]): a
// bf16 GPT trained with the CUDA graph saves every 3 steps while the next steps run; each
// checkpoint holds the state of its own step (the copies into page-locked memory were queued
// before the next steps changed it): the last one equals the trained model bit for bit, an
// earlier one equals a synchronous run's at that step, and the run resumed from it ends as the
// uninterrupted one.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint/folder.h"
#include "checkpoint/state.h"
#include "gpu_support.h"
#include "util/dir.h"

namespace dtrain::test {
namespace {

const char* kAsyncGpt = R"(
run: {seed: 5, log_every: 0, quiet: true}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 2048, seq_len: 32}
data: {format: synthetic, synthetic_task: tokens, synthetic_shape: [32], synthetic_classes: 2048,
       synthetic_size: 512, synthetic_test_size: 64, workers: 2}
train: {epochs: 1, max_steps: 12, global_batch: 16, optimizer: adamw, lr: 0.001,
        weight_decay: 0.1, precision: bf16, eval: false}
checkpoint: {every_epoch: false, every_steps: 3, keep: 10}
)";

detail::SharedState state_at(const std::string& run, int64_t step) {
  const std::string dir = detail::CheckpointFolder(run + "/checkpoints").path_of(step);
  detail::checked(dir);  // complete, every file as its marker lists it
  return detail::decode_shared(detail::read_file(dir + "/state.pt"), dir + "/state.pt");
}

double worst_difference(const detail::NamedTensors& a, const detail::NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(
        worst,
        (a[i].second.to(at::kDouble) - b[i].second.to(at::kDouble)).abs().max().item<double>());
  }
  return worst;
}

TEST(GpuAsyncCheckpoint, EachSaveHoldsItsStepAndResumesAsTheUninterruptedRun) {
  char tmpl[] = "/tmp/dtrain-gpu-async-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const TrainRun bg =
      train(kAsyncGpt, {"run.dir=" + dir, "run.name=bg", "checkpoint.async=on"}, kGpu);
  EXPECT_NE(bg.summary.step_mode.find("graph"), std::string::npos) << bg.summary.step_mode;
  EXPECT_GT(bg.summary.memory.checkpoint_pinned, 0);
  EXPECT_EQ(bg.summary.checkpoint_step, 12);
  // The last checkpoint is the trained model, bit for bit (parameters in the model's order).
  const detail::SharedState last = state_at(dir + "/bg", 12);
  size_t k = 0;
  for (const auto& [name, t] : last.model) {
    if (k == bg.params.size()) break;
    EXPECT_TRUE(at::equal(t, bg.params[k])) << name;
    ++k;
  }
  EXPECT_EQ(k, bg.params.size());
  // An earlier one holds its own step's state, as a synchronous save writes it.
  const TrainRun sync =
      train(kAsyncGpt, {"run.dir=" + dir, "run.name=sync", "checkpoint.async=off"}, kGpu);
  for (int64_t step : {3, 6, 9}) {
    const detail::SharedState a = state_at(dir + "/bg", step), b = state_at(dir + "/sync", step);
    EXPECT_EQ(a.position.step, step);
    EXPECT_LT(worst_difference(a.model, b.model), 1e-3) << "step " << step;
    EXPECT_LT(worst_difference(a.optimizer, b.optimizer), 1e-3) << "step " << step;
  }
  // Resumed from step 6's background-written checkpoint: as the uninterrupted run.
  const std::string checkpoints = dir + "/bg/checkpoints/";
  for (const std::string& path :
       {checkpoints + "step-000000009", checkpoints + "step-000000012", dir + "/bg/model.pt"})
    detail::remove_tree(path);
  const TrainRun rest =
      train(kAsyncGpt, {"run.dir=" + dir, "run.name=bg", "checkpoint.async=on"}, kGpu);
  EXPECT_EQ(rest.summary.steps, 12);
  EXPECT_LT(max_rel(rest, bg), 1e-4);
  detail::remove_tree(dir);
}

}  // namespace
}  // namespace dtrain::test
