// The image recipe's losses and batch mixing against PyTorch and torchvision (DTRAIN_REF_PYTHON,
// Debian's python3-torch): label smoothing and soft targets against F.cross_entropy, loss and
// gradient; Mixup, CutMix and RandomErasing (train/batch_mix.h) against torchvision's reference
// RandomMixup / RandomCutmix code (references/classification/transforms.py) and F.erase on the
// same lambda, box centre and erase boxes, bit for bit; and the draws: Beta's moments, the
// choice between the two, the same draws for the same step.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "data/images/image_transforms.h"
#include "dtrain/config.h"
#include "test_support.h"
#include "train/batch_mix.h"
#include "train/loss.h"

namespace dtrain {
namespace {

using test::python_failure;
using test::run_python;
using test::TempDir;

void mix_write(const TempDir& dir, const std::string& name, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream(dir.file(name), std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

at::Tensor mix_read(const TempDir& dir, const std::string& name, at::IntArrayRef shape) {
  at::Tensor t = at::empty(shape, at::kFloat);
  std::ifstream(dir.file(name), std::ios::binary)
      .read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  return t;
}

// Each case: the loss and its gradient for the logits, from F.cross_entropy.
const char* kMixLossScript = R"PY(
import sys, numpy as np, torch, torch.nn.functional as F
d = sys.argv[1]
def read(name, shape, dtype=np.float32):
    return torch.from_numpy(np.fromfile(d + "/" + name, dtype=dtype).reshape(shape))
for line in open(d + "/cases.txt"):
    name, n, c, kind, eps = line.split()
    n, c, eps = int(n), int(c), float(eps)
    x = read(name + ".x", (n, c)).requires_grad_(True)
    t = read(name + ".t", (n,), np.int64) if kind == "ids" else read(name + ".t", (n, c))
    loss = F.cross_entropy(x, t, label_smoothing=eps)
    loss.backward()
    out = torch.cat([loss.detach().reshape(1), x.grad.reshape(-1)])
    out.numpy().astype(np.float32).tofile(d + "/" + name + ".out")
print("DONE")
)PY";

TEST(LabelSmoothing, LossAndGradientAsPyTorch) {
  TempDir dir;
  at::manual_seed(7);
  const int64_t n = 6, c = 11;
  struct Case {
    std::string name;
    bool soft;
    double eps;
  };
  const std::vector<Case> cases = {{"ids0", false, 0.0},
                                   {"ids1", false, 0.1},
                                   {"ids3", false, 0.3},
                                   {"soft0", true, 0.0},
                                   {"soft1", true, 0.1}};
  std::ofstream list(dir.file("cases.txt"));
  std::vector<at::Tensor> xs, ts;
  for (const Case& k : cases) {
    at::Tensor x = at::randn({n, c}) * 3;
    at::Tensor t = k.soft ? at::softmax(at::randn({n, c}), 1) : at::randint(c, {n}, at::kLong);
    mix_write(dir, k.name + ".x", x);
    mix_write(dir, k.name + ".t", t);
    list << k.name << " " << n << " " << c << " " << (k.soft ? "soft" : "ids") << " " << k.eps
         << "\n";
    xs.push_back(x);
    ts.push_back(t);
  }
  list.close();
  const auto run = run_python(dir, kMixLossScript, "'" + dir.path() + "'");
  ASSERT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("the cross-entropy reference", run);
  for (size_t i = 0; i < cases.size(); ++i) {
    at::Tensor x = xs[i].clone().requires_grad_(true);
    at::Tensor loss = detail::compute_loss(LossKind::kCrossEntropy, x, ts[i], /*sum=*/false,
                                           /*reuse_outputs=*/false, cases[i].eps);
    loss.backward();
    const at::Tensor want = mix_read(dir, cases[i].name + ".out", {1 + n * c});
    EXPECT_NEAR(loss.item<double>(), want[0].item<double>(), 1e-6) << cases[i].name;
    EXPECT_TRUE(at::allclose(x.grad().reshape(-1), want.narrow(0, 1, n * c), 1e-5, 1e-7))
        << cases[i].name;
  }
  // Smoothing changes the loss: the test would see a key that did nothing.
  const at::Tensor plain =
      detail::compute_loss(LossKind::kCrossEntropy, xs[1], ts[1], false, false, 0.0);
  EXPECT_GT(std::abs(plain.item<double>() - mix_read(dir, "ids1.out", {1})[0].item<double>()),
            1e-3);
}

// torchvision's references/classification/transforms.py, RandomMixup and RandomCutmix forward,
// with the draws given (lambda; for CutMix the centre r_x, r_y) instead of torch's generator,
// after F.erase of each image's box (RandomErasing with value 0).
const char* kMixScript = R"PY(
import math, sys, numpy as np, torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
d = sys.argv[1]
n, ch, h, w, classes = [int(v) for v in open(d + "/shape.txt").read().split()]
batch0 = torch.from_numpy(np.fromfile(d + "/images", dtype=np.float32).reshape(n, ch, h, w))
target0 = torch.from_numpy(np.fromfile(d + "/targets", dtype=np.int64))
erase = np.fromfile(d + "/erase", dtype=np.int64).reshape(n, 4)
for line in open(d + "/draws.txt"):
    name, kind, lam, r_x, r_y = line.split()
    lambda_param, r_x, r_y = float(lam), int(r_x), int(r_y)
    batch = torch.stack([TF.erase(batch0[i], *[int(v) for v in erase[i]], v=torch.tensor(0.0))
                         if erase[i][2] > 0 else batch0[i] for i in range(n)])
    target = F.one_hot(target0, num_classes=classes).to(dtype=batch.dtype)
    batch_rolled = batch.roll(1, 0)
    target_rolled = target.roll(1, 0)
    if kind == "mixup":
        batch_rolled.mul_(1.0 - lambda_param)
        batch.mul_(lambda_param).add_(batch_rolled)
    elif kind == "cutmix":
        W, H = w, h
        r = 0.5 * math.sqrt(1.0 - lambda_param)
        r_w_half = int(r * W)
        r_h_half = int(r * H)
        x1 = int(torch.clamp(torch.tensor(r_x - r_w_half), min=0))
        y1 = int(torch.clamp(torch.tensor(r_y - r_h_half), min=0))
        x2 = int(torch.clamp(torch.tensor(r_x + r_w_half), max=W))
        y2 = int(torch.clamp(torch.tensor(r_y + r_h_half), max=H))
        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lambda_param = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
    if kind != "none":
        target_rolled.mul_(1.0 - lambda_param)
        target.mul_(lambda_param).add_(target_rolled)
    batch.numpy().tofile(d + "/" + name + ".images")
    target.numpy().tofile(d + "/" + name + ".targets")
print("DONE")
)PY";

TEST(BatchMix, MixupCutmixAndErasingAsTorchvision) {
  TempDir dir;
  at::manual_seed(11);
  const int64_t n = 5, ch = 3, h = 9, w = 7, classes = 4;
  const at::Tensor images = at::randn({n, ch, h, w});
  const at::Tensor targets = at::tensor({0, 3, 1, 1, 2}, at::kLong);
  // Image 1 erased at its corner, image 3 inside; the others not.
  const at::Tensor erase =
      at::tensor({0, 0, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 2, 1, 4, 5, 0, 0, 0, 0}, at::kLong)
          .view({n, 4});
  mix_write(dir, "images", images);
  mix_write(dir, "targets", targets);
  mix_write(dir, "erase", erase);
  std::ofstream(dir.file("shape.txt")) << n << " " << ch << " " << h << " " << w << " " << classes;
  struct Draw {
    std::string name, kind;
    double lambda;
    int64_t r_x, r_y;
  };
  const std::vector<Draw> draws = {{"none", "none", 1.0, 0, 0},
                                   {"mixup", "mixup", 0.3137, 0, 0},
                                   {"cut", "cutmix", 0.61, 3, 2},
                                   {"corner", "cutmix", 0.05, 6, 8},
                                   {"tiny", "cutmix", 0.999, 4, 4}};
  {
    std::ofstream f(dir.file("draws.txt"));
    for (const Draw& d : draws)
      f << d.name << " " << d.kind << " " << d.lambda << " " << d.r_x << " " << d.r_y << "\n";
  }
  const auto run = run_python(dir, kMixScript, "'" + dir.path() + "'");
  ASSERT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("the torchvision mixing reference", run);
  for (const Draw& d : draws) {
    detail::MixDraw draw;
    if (d.kind == "mixup") {
      draw.kind = detail::MixDraw::Kind::kMixup;
      draw.lambda = draw.target_lambda = d.lambda;
    } else if (d.kind == "cutmix") {
      draw = detail::cutmix_box(d.lambda, d.r_y, d.r_x, h, w);
    }
    for (const bool channels_last : {false, true}) {
      const at::Tensor in =
          channels_last ? images.contiguous(at::MemoryFormat::ChannelsLast) : images;
      const auto [x, y] = detail::BatchMix::mix(in, targets, classes, draw, erase);
      EXPECT_TRUE(at::equal(x.contiguous(), mix_read(dir, d.name + ".images", {n, ch, h, w})))
          << d.name;
      EXPECT_TRUE(at::equal(y, mix_read(dir, d.name + ".targets", {n, classes}))) << d.name;
      if (channels_last) {
        EXPECT_TRUE(x.is_contiguous(at::MemoryFormat::ChannelsLast)) << d.name;
      }
    }
  }
  // The mixed inputs differ from the plain ones: a mix that did nothing would fail above too.
  const auto [plain, soft] = detail::BatchMix::mix(images, targets, classes, detail::MixDraw{});
  EXPECT_TRUE(at::equal(plain, images));
  EXPECT_TRUE(at::equal(soft.argmax(1), targets));
}

TEST(BatchMix, DrawsAreBetaAndKeyedByStep) {
  for (const double alpha : {0.2, 1.0, 3.0}) {
    detail::SampleRandom r(5, 0, 0);
    double sum = 0, sq = 0;
    const int k = 40000;
    for (int i = 0; i < k; ++i) {
      const double v = detail::beta_draw(alpha, r);
      ASSERT_TRUE(v >= 0 && v <= 1) << v;
      sum += v;
      sq += v * v;
    }
    const double mean = sum / k, var = sq / k - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01) << alpha;
    EXPECT_NEAR(var, 1.0 / (4.0 * (2.0 * alpha + 1.0)), 0.01) << alpha;  // Beta(a, a)'s variance
  }
  detail::MixOptions o;
  o.mixup_alpha = 0.2;
  o.cutmix_alpha = 1.0;
  o.cutmix_prob = 0.25;
  o.num_classes = 3;
  o.random_erase = 0.5;
  o.seed = 9;
  const at::Tensor batch = at::zeros({4, 3, 16, 12});
  detail::BatchMix a(o, at::kCPU, 0), b(o, at::kCPU, 0), other_rank(o, at::kCPU, 1);
  int cutmix = 0, differ = 0;
  const int steps = 2000;
  for (int s = 0; s < steps; ++s) {
    a.draw(0, s, batch);
    b.draw(0, s, batch);
    other_rank.draw(0, s, batch);
    EXPECT_EQ(a.last().lambda, b.last().lambda);
    EXPECT_EQ(a.last().x1, b.last().x1);
    differ += a.last().lambda != other_rank.last().lambda;
    if (a.last().kind == detail::MixDraw::Kind::kCutmix) {
      ++cutmix;
      EXPECT_TRUE(a.last().x1 <= a.last().x2 && a.last().x2 <= 12 && a.last().y2 <= 16);
    } else {
      EXPECT_EQ(a.last().kind, detail::MixDraw::Kind::kMixup);
    }
  }
  EXPECT_NEAR(static_cast<double>(cutmix) / steps, 0.25, 0.04);
  EXPECT_GT(differ, steps * 9 / 10);
  // A step drawn again (a retried step, a resumed run) draws the same.
  a.draw(0, 17, batch);
  const double again = a.last().lambda;
  a.draw(0, 18, batch);
  a.draw(0, 17, batch);
  EXPECT_EQ(a.last().lambda, again);
  o.mix_prob = 0;
  detail::BatchMix never(o, at::kCPU, 0);
  never.draw(0, 3, batch);
  EXPECT_EQ(never.last().kind, detail::MixDraw::Kind::kNone);
}

}  // namespace
}  // namespace dtrain
