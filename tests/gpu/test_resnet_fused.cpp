// ResNets through the fused BatchNorm (Note [fused BatchNorm]) on the GPU: with
// model.fused_kernels and channels-last every BatchNorm of resnet18 and resnet50 is the fused op
// (none without); one fp32 training step's gradients and running statistics through it are as
// close to double as LibTorch's; and ResNet-50 in bf16, its step captured in a CUDA graph, reaches
// over 200 steps the loss that LibTorch's ops reach, within the distance between bf16 and fp32.
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <set>

#include "gpu_support.h"

namespace dtrain::test {
namespace {

const char* kResnet = R"(
run: {dir: "", seed: 3, log_every: 20, quiet: true}
model: {name: resnet18, channels_last: true}
data: {format: synthetic, synthetic_task: images, synthetic_shape: [3, 32, 32],
       synthetic_classes: 10, synthetic_size: 256, synthetic_test_size: 0, workers: 2}
train: {epochs: 100, max_steps: 8, global_batch: 32, optimizer: sgd, lr: 0.05, momentum: 0.9,
        weight_decay: 1.0e-4, eval: false}
)";

// A ResNet on the GPU in training mode, its weights drawn from seed 9.
std::shared_ptr<Model> resnet(const std::string& arch, bool fused) {
  ModelConfig c;
  c.name = arch;
  c.channels_last = true;
  c.fused_kernels = fused;
  DataSpec spec;
  spec.input_shape = {3, 32, 32};
  spec.num_classes = 10;
  at::manual_seed(9);
  auto model = make_model(arch, c, spec);
  model->to(kGpu);
  model->train();
  return model;
}

// |a - b| / |b| (norms, in double).
double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() /
         std::max(1e-12, b.to(at::kDouble).norm().item<double>());
}

// The nodes named `kind` (dtrain's fused BatchNorm or max-pool) in the autograd graph of one
// training forward pass.
int fused_nodes(const std::string& arch, bool fused, const std::string& kind = "FusedBatchNorm") {
  const at::Tensor out =
      resnet(arch, fused)->forward(at::randn({4, 3, 32, 32}, at::TensorOptions().device(kGpu)));
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo = {out.grad_fn().get()};
  int count = 0;
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    if (n->name().find(kind) != std::string::npos) ++count;
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return count;
}

TEST(ResnetFused, EveryBatchNormIsFusedOnCudaAndNoneWithoutTheKey) {
  // resnet18: the stem, 8 blocks of 2, 3 downsamples; resnet50: the stem, 16 blocks of 3, 4.
  EXPECT_EQ(fused_nodes("resnet18", true), 20);
  EXPECT_EQ(fused_nodes("resnet50", true), 53);
  EXPECT_EQ(fused_nodes("resnet18", false), 0);
  // The stem's max-pool is dtrain's kernel (Note [max-pool kernels]) with the key only.
  EXPECT_EQ(fused_nodes("resnet50", true, "MaxPool>"), 1);   // CppNode<...MaxPool>
  EXPECT_EQ(fused_nodes("resnet50", false, "MaxPool>"), 0);  // not MaxPool2DWithIndicesBackward0
}

// One training forward and backward of each ResNet from the same weights and input, in fp32
// through the fused BatchNorm and through LibTorch's ops, against the same in double: the fused
// path's loss, gradients and running statistics are as close to double as LibTorch's fp32 ones.
TEST(ResnetFused, Fp32GradientsAndRunningStatisticsAsCloseToDoubleAsLibTorchs) {
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  for (const std::string arch : {"resnet18", "resnet50"}) {
    SCOPED_TRACE(arch);
    at::manual_seed(5);
    const auto gpu = at::TensorOptions().device(kGpu);
    const at::Tensor images = at::randn({8, 3, 32, 32}, gpu).mul(2).add(0.3);
    const at::Tensor labels = at::randint(0, 10, {8}, gpu.dtype(at::kLong));
    struct Pass {
      double loss;
      std::vector<at::Tensor> grads, buffers;
    };
    std::vector<Pass> runs;  // fused fp32, LibTorch fp32, LibTorch double
    for (int k = 0; k < 3; ++k) {
      auto model = resnet(arch, k == 0);
      if (k == 2) model->to(at::kDouble);
      const at::Tensor in = k == 2 ? images.to(at::kDouble) : images;
      const at::Tensor loss = at::cross_entropy_loss(model->forward(in), labels);
      loss.backward();
      Pass p{loss.item<double>(), {}, {}};
      for (const auto& t : model->parameters()) p.grads.push_back(t.grad().to(at::kDouble));
      for (const auto& t : model->buffers()) p.buffers.push_back(t.to(at::kDouble));
      runs.push_back(std::move(p));
    }
    const Pass &fused = runs[0], &plain = runs[1], &exact = runs[2];
    EXPECT_LE(std::fabs(fused.loss - exact.loss), 2 * std::fabs(plain.loss - exact.loss) + 1e-6);
    double fused_err = 0, plain_err = 0;
    for (size_t i = 0; i < exact.grads.size(); ++i) {
      fused_err = std::max(fused_err, rel(fused.grads[i], exact.grads[i]));
      plain_err = std::max(plain_err, rel(plain.grads[i], exact.grads[i]));
    }
    for (size_t i = 0; i < exact.buffers.size(); ++i) {
      fused_err = std::max(fused_err, rel(fused.buffers[i], exact.buffers[i]));
      plain_err = std::max(plain_err, rel(plain.buffers[i], exact.buffers[i]));
    }
    std::printf(
        "%s: largest relative difference from double (gradients, running statistics): "
        "fused %.3g, LibTorch %.3g\n",
        arch.c_str(), fused_err, plain_err);
    EXPECT_LE(fused_err, 2 * plain_err + 1e-6);
  }
  at::globalContext().setAllowTF32CuBLAS(true);
  at::globalContext().setAllowTF32CuDNN(true);
}

// Activation checkpointing runs each block again in backward, unforked (one output, the next
// block's two uses summed by autograd): the gradients and running statistics are those of the
// forked run without it, up to the order of that sum.
TEST(ResnetFused, ActivationCheckpointingGivesTheForkedRunsGradients) {
  at::globalContext().setAllowTF32CuDNN(false);
  for (const std::string arch : {"resnet18", "resnet50"}) {
    SCOPED_TRACE(arch);
    at::manual_seed(6);
    const auto gpu = at::TensorOptions().device(kGpu);
    const at::Tensor images = at::randn({8, 3, 32, 32}, gpu);
    const at::Tensor labels = at::randint(0, 10, {8}, gpu.dtype(at::kLong));
    std::vector<std::vector<at::Tensor>> runs;
    for (bool checkpoint : {false, true}) {
      auto model = resnet(arch, true);
      ASSERT_TRUE(model->set_activation_checkpointing(checkpoint ? ActivationCheckpointing::kBlocks
                                                                 : ActivationCheckpointing::kOff));
      at::cross_entropy_loss(model->forward(images), labels).backward();
      std::vector<at::Tensor> out;
      for (const auto& t : model->parameters()) out.push_back(t.grad().clone());
      for (const auto& t : model->buffers()) out.push_back(t.to(at::kDouble));
      runs.push_back(out);
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    double worst = 0;
    for (size_t i = 0; i < runs[0].size(); ++i)
      worst = std::max(worst, rel(runs[1][i], runs[0][i]));
    EXPECT_LT(worst, 1e-4);
  }
  at::globalContext().setAllowTF32CuDNN(true);
}

// A few hundred steps of memorizing 64 random images (AdamW): the fused bf16 run reaches the loss
// of LibTorch's bf16 run within bf16's noise.
TEST(ResnetFused, Resnet50Bf16In200GraphStepsReachesLibTorchsLoss) {
  const std::vector<std::string> o = {"model.name=resnet50",    "train.max_steps=200",
                                      "data.synthetic_size=64", "train.optimizer=adamw",
                                      "train.precision=bf16",   "train.cuda_graph=on",
                                      "train.lr=0.001",         "train.weight_decay=0"};
  std::vector<std::string> plain_o = o, fp32_o = o;
  plain_o.push_back("model.fused_kernels=false");
  fp32_o[4] = "train.precision=fp32";
  fp32_o.push_back("model.fused_kernels=false");
  const TrainRun fused = train(kResnet, o, kGpu);
  const TrainRun plain = train(kResnet, plain_o, kGpu);
  const TrainRun fp32 = train(kResnet, fp32_o, kGpu);
  const double lf = fused.summary.last_loss, lp = plain.summary.last_loss,
               l32 = fp32.summary.last_loss;
  std::printf(
      "ResNet-50, mean loss of steps 181-200: fused bf16 %.4f, LibTorch bf16 %.4f, "
      "LibTorch fp32 %.4f\n",
      lf, lp, l32);
  EXPECT_EQ(fused.summary.step_mode.rfind("CUDA graph", 0), 0u) << fused.summary.step_mode;
  // Both memorized the images (from ln 10 at the start), and the fused run's loss is as close to
  // LibTorch's bf16 one as that is to fp32, or within 5% of the starting loss (near zero the
  // runs' distances are bf16 noise of that size: 0.020, 0.067 and 0.061 on an H100).
  const double start = std::log(10.0);
  ASSERT_LT(lp, 0.1 * start);
  EXPECT_LT(lf, 0.1 * start);
  EXPECT_LE(std::fabs(lf - lp), std::max(2 * std::fabs(lp - l32), 0.05 * start));
}

}  // namespace
}  // namespace dtrain::test
