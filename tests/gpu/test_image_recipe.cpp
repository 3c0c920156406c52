// The gpu tier: the image recipe's device work on the GPU as on the CPU (whose pixels the unit
// tier holds to torchvision's): every automatic-augmentation op on a batch (the color ops byte
// for byte; the affine ops, whose grid's matrix product is CUDA's, printing how many pixels take
// the other neighbour), the batch mixing and erasing bit for bit, and a training run with the
// whole recipe in the CUDA graph of its step.
#include "data/images/augment_ops.h"
#include "data/images/auto_augment.h"
#include "gpu_support.h"
#include "train/batch_mix.h"

namespace dtrain::test {
namespace {

using detail::AugmentOp;
using detail::OpDraw;

TEST(GpuImageRecipe, AugmentOpsOnTheGpuAsOnTheCpu) {
  at::manual_seed(5);
  const at::Tensor images = at::randint(0, 256, {64, 3, 37, 29}, at::kByte);
  const std::vector<std::pair<AugmentOp, std::vector<double>>> cases = {
      {AugmentOp::kShearX, {-0.3, 0.17}},    {AugmentOp::kShearY, {0.3, -0.05}},
      {AugmentOp::kTranslateX, {-9.0, 4.0}}, {AugmentOp::kTranslateY, {12.0, -3.0}},
      {AugmentOp::kRotate, {30.0, -90.0}},   {AugmentOp::kBrightness, {-0.5, 0.9}},
      {AugmentOp::kColor, {0.4, -0.9}},      {AugmentOp::kContrast, {0.7, -0.3}},
      {AugmentOp::kSharpness, {0.9, -0.5}},  {AugmentOp::kPosterize, {2.0, 7.0}},
      {AugmentOp::kSolarize, {0.0, 128.0}},  {AugmentOp::kAutoContrast, {0.0}},
      {AugmentOp::kEqualize, {0.0}},         {AugmentOp::kInvert, {0.0}},
      {AugmentOp::kIdentity, {0.0}}};
  for (const auto& [op, magnitudes] : cases) {
    std::vector<OpDraw> ops;
    for (int64_t i = 0; i < images.size(0); ++i)
      ops.push_back({op, magnitudes[static_cast<size_t>(i) % magnitudes.size()]});
    const at::Tensor cpu = detail::apply_augment_ops(images, ops);
    const at::Tensor gpu = detail::apply_augment_ops(images.to(kGpu), ops).cpu();
    const bool affine = op == AugmentOp::kShearX || op == AugmentOp::kShearY ||
                        op == AugmentOp::kTranslateX || op == AugmentOp::kTranslateY ||
                        op == AugmentOp::kRotate;
    const int64_t differ = cpu.ne(gpu).sum().item<int64_t>();
    std::printf("%-14s %lld of %lld values differ from the CPU's\n", detail::augment_op_name(op),
                static_cast<long long>(differ), static_cast<long long>(cpu.numel()));
    if (affine)  // a point halfway between two pixels may round the other way
      EXPECT_LT(static_cast<double>(differ), 0.01 * static_cast<double>(cpu.numel()))
          << detail::augment_op_name(op);
    else
      EXPECT_EQ(differ, 0) << detail::augment_op_name(op);
  }
}

TEST(GpuImageRecipe, MixingAndErasingOnTheGpuAsOnTheCpu) {
  at::manual_seed(6);
  const at::Tensor images = at::randn({8, 3, 16, 12}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor targets = at::randint(0, 5, {8}, at::kLong);
  at::Tensor erase = at::zeros({8, 4}, at::kLong);
  erase[2] = at::tensor({1, 2, 5, 4}, at::kLong);
  erase[5] = at::tensor({0, 0, 3, 3}, at::kLong);
  detail::MixDraw mixup;
  mixup.kind = detail::MixDraw::Kind::kMixup;
  mixup.lambda = mixup.target_lambda = 0.37;
  for (const detail::MixDraw& d : {mixup, detail::cutmix_box(0.45, 7, 5, 16, 12)}) {
    const auto [x, y] = detail::BatchMix::mix(images, targets, 5, d, erase);
    const auto [gx, gy] = detail::BatchMix::mix(images.to(kGpu), targets.to(kGpu), 5, d, erase);
    EXPECT_TRUE(at::equal(x, gx.cpu()));
    EXPECT_TRUE(at::equal(y, gy.cpu()));
    EXPECT_TRUE(gx.is_contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// ResNet-18 on synthetic uint8 images with label smoothing, Mixup and CutMix, RandomErasing and
// the weight average: the step is captured in a CUDA graph and the loss stays finite.
TEST(GpuImageRecipe, TheRecipeTrainsInACudaGraph) {
  const TrainRun r = train(R"(
run: {dir: "", seed: 3, log_every: 4, quiet: true}
model: {name: resnet18, channels_last: true}
data: {format: synthetic, synthetic_task: images, synthetic_shape: [3, 32, 32], synthetic_size: 512,
       synthetic_test_size: 64, synthetic_classes: 10, synthetic_uint8: true, workers: 1}
train: {epochs: 1, max_steps: 12, global_batch: 32, optimizer: sgd, lr: 0.01, momentum: 0.9,
        precision: bf16, cuda_graph: on, label_smoothing: 0.1, mixup_alpha: 0.2, cutmix_alpha: 1.0,
        ema_decay: 0.99, ema_every: 2, ema_warmup_steps: 0}
checkpoint: {every_epoch: false}
)",
                           {}, kGpu);
  EXPECT_NE(r.summary.step_mode.find("CUDA graph: captured"), std::string::npos)
      << r.summary.step_mode;
  EXPECT_TRUE(std::isfinite(r.summary.last_loss)) << r.summary.last_loss;
  EXPECT_GT(r.summary.eval.count, 0);
}

}  // namespace
}  // namespace dtrain::test
