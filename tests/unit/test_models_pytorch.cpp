// Models gpt and resnet18 give the logits of a plain-PyTorch implementation run in
// DTRAIN_REF_PYTHON on the same weights (float64, eval and train mode).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "model_support.h"
#include "test_support.h"

namespace dtrain::test {
namespace {

// ---- agreement with plain PyTorch -----------------------------------------------------------

// A model implemented in plain PyTorch from the weights' names (no torchvision, no
// F.scaled_dot_product_attention: Debian's torch is 1.13), in float64.
const char* kReferenceScript = R"PY(
import math, sys
import torch
import torch.nn.functional as F

def load(prefix):
    data = open(prefix + ".bin", "rb").read()
    out = {}
    for line in open(prefix + ".txt"):
        name, offset, shape = line.rstrip("\n").split("\t")
        shape = [int(s) for s in shape.split(",")] if shape else []
        n = 1
        for s in shape:
            n *= s
        off = int(offset)
        t = torch.frombuffer(bytearray(data[off * 4:(off + n) * 4]), dtype=torch.float32)
        out[name] = t.reshape(shape).to(torch.float64)
    return out

def gpt(P, idx, n_head):
    B, T = idx.shape
    C = P["wte.weight"].shape[1]
    D = C // n_head
    x = P["wte.weight"][idx] + P["wpe.weight"][:T]
    ln = lambda x, p: F.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], 1e-5)
    lin = lambda x, p: x @ P[p + ".weight"].t() + P[p + ".bias"]
    gelu = lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                                 (x + 0.044715 * x ** 3)))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    i = 0
    while ("h.%d.ln_1.weight" % i) in P:
        h = "h.%d." % i
        q, k, v = lin(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
        q, k, v = [t.reshape(B, T, n_head, D).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, h + "attn.c_proj")
        x = x + lin(gelu(lin(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj")
        i += 1
    return ln(x, "ln_f") @ P["wte.weight"].t()

def resnet(P, x, training):
    bn = lambda x, p: F.batch_norm(x, P[p + ".running_mean"].clone(), P[p + ".running_var"].clone(),
                                   P[p + ".weight"], P[p + ".bias"], training, 0.1, 1e-5)
    conv = lambda x, p, stride, pad: F.conv2d(x, P[p + ".weight"], None, stride, pad)
    x = F.relu(bn(conv(x, "conv1", 2, 3), "bn1"))
    x = F.max_pool2d(x, 3, 2, 1)
    for s in range(1, 5):
        i = 0
        while ("layer%d.%d.conv1.weight" % (s, i)) in P:
            b = "layer%d.%d." % (s, i)
            stride = 2 if s > 1 and i == 0 else 1
            if (b + "conv3.weight") in P:  # Bottleneck, stride on the 3x3 conv
                out = F.relu(bn(conv(x, b + "conv1", 1, 0), b + "bn1"))
                out = F.relu(bn(conv(out, b + "conv2", stride, 1), b + "bn2"))
                out = bn(conv(out, b + "conv3", 1, 0), b + "bn3")
            else:
                out = F.relu(bn(conv(x, b + "conv1", stride, 1), b + "bn1"))
                out = bn(conv(out, b + "conv2", 1, 1), b + "bn2")
            if (b + "downsample.0.weight") in P:
                sc = bn(conv(x, b + "downsample.0", stride, 0), b + "downsample.1")
            else:
                sc = x
            x = F.relu(out + sc)
            i += 1
    x = x.mean((2, 3))
    return x @ P["fc.weight"].t() + P["fc.bias"]

kind, prefix = sys.argv[1], sys.argv[2]
P = load(prefix + "_params")
X = load(prefix + "_input")["input"]
if kind == "gpt":
    outs = [gpt(P, X.long(), int(sys.argv[3]))]
else:
    outs = [resnet(P, X, False), resnet(P, X, True)]
with open(prefix + "_out.txt", "w") as f:
    for o in outs:
        f.write(" ".join(repr(float(v)) for v in o.reshape(-1).tolist()) + "\n")
print("DONE")
)PY";

// Tensors by name: <prefix>.txt lists "name<TAB>offset<TAB>d0,d1,..." and <prefix>.bin holds
// the float32 values.
void write_tensors(const std::string& prefix,
                   const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::ofstream index(prefix + ".txt");
  std::ofstream data(prefix + ".bin", std::ios::binary);
  int64_t offset = 0;
  for (const auto& kv : tensors) {
    const at::Tensor t = kv.second.detach().to(at::kFloat).contiguous();
    index << kv.first << '\t' << offset << '\t';
    for (int64_t d = 0; d < t.dim(); ++d) index << (d ? "," : "") << t.size(d);
    index << '\n';
    data.write(reinterpret_cast<const char*>(t.data_ptr<float>()),
               static_cast<std::streamsize>(t.numel() * sizeof(float)));
    offset += t.numel();
  }
}

std::vector<std::pair<std::string, at::Tensor>> state_of(torch::nn::Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& kv : m.named_parameters()) out.emplace_back(kv.key(), kv.value());
  for (const auto& kv : m.named_buffers()) {
    if (at::isFloatingType(kv.value().scalar_type())) out.emplace_back(kv.key(), kv.value());
  }
  return out;
}

// Runs the reference script; returns one tensor per output line. Fails (not skips) when the
// reference Python or its torch is missing.
std::vector<at::Tensor> run_reference(const TempDir& dir, const std::string& args) {
  const auto run = run_python(dir, kReferenceScript, args);
  EXPECT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("the PyTorch reference", run);
  std::vector<at::Tensor> outs;
  std::ifstream f(dir.file("ref_out.txt"));
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::vector<double> v;
    for (double x; in >> x;) v.push_back(x);
    outs.push_back(at::tensor(v, at::kDouble));
  }
  return outs;
}

TEST(Gpt, MatchesPlainPyTorch) {
  at::manual_seed(7);
  auto m = build("gpt", gpt_config(2, 2, 16, 32, 8), token_spec(8, 32));
  {
    // Larger than GPT-2's init, so that every part of the block shapes the logits.
    at::NoGradGuard no_grad;
    for (auto& p : m->parameters()) p.normal_(0.0, 0.3);
  }
  m->eval();
  const at::Tensor x = at::randint(0, 32, {3, 8}, at::kLong);  // (B, T)
  const at::Tensor logits = m->forward(x);                     // (B, T, V)
  TempDir dir;
  write_tensors(dir.file("ref_params"), state_of(*m));
  write_tensors(dir.file("ref_input"), {{"input", x}});
  const auto ref = run_reference(dir, "gpt '" + dir.file("ref") + "' 2");
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(ref[0].numel(), logits.numel());
  const double diff = (logits.to(at::kDouble).reshape({-1}) - ref[0]).abs().max().item<double>();
  EXPECT_LT(diff, 1e-4) << "max |logits - PyTorch| = " << diff << " (max |logit| "
                        << ref[0].abs().max().item<double>() << ")";
  // T < seq_len uses the first T positions.
  const at::Tensor short_logits = m->forward(x.narrow(1, 0, 5));
  EXPECT_TRUE(at::allclose(short_logits, logits.narrow(1, 0, 5), 1e-5, 1e-5));
}

TEST(ResNet, Resnet18MatchesPlainPyTorch) {
  at::manual_seed(11);
  dtrain::ModelConfig c;
  auto m = build("resnet18", c, image_spec({3, 32, 32}, 10));
  {
    // Running statistics away from (0, 1) and affine BN, so that eval mode tests them.
    at::NoGradGuard no_grad;
    for (auto& kv : m->named_buffers()) {
      if (kv.key().find("running_mean") != std::string::npos) kv.value().uniform_(-0.2, 0.2);
      if (kv.key().find("running_var") != std::string::npos) kv.value().uniform_(0.5, 1.5);
    }
    for (auto& kv : m->named_parameters()) {
      if (kv.key().find("bn") != std::string::npos ||
          kv.key().find("downsample.1") != std::string::npos) {
        kv.value().uniform_(kv.key().find("weight") != std::string::npos ? 0.5 : -0.2,
                            kv.key().find("weight") != std::string::npos ? 1.5 : 0.2);
      }
    }
  }
  const at::Tensor x = at::randn({8, 3, 64, 64});  // layer4 sees 2x2: batch statistics of 32
  TempDir dir;
  write_tensors(dir.file("ref_params"), state_of(*m));
  write_tensors(dir.file("ref_input"), {{"input", x}});
  m->eval();
  const at::Tensor eval_out = m->forward(x);
  m->train();
  const at::Tensor train_out = m->forward(x);  // batch statistics
  const auto ref = run_reference(dir, "resnet '" + dir.file("ref") + "'");
  ASSERT_EQ(ref.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const at::Tensor ours = (i == 0 ? eval_out : train_out).to(at::kDouble).reshape({-1});
    ASSERT_EQ(ref[i].numel(), ours.numel());
    const double scale = std::max(1.0, ref[i].abs().max().item<double>());
    const double diff = (ours - ref[i]).abs().max().item<double>();
    EXPECT_LT(diff, 1e-4 * scale) << (i == 0 ? "eval" : "train") << " mode: max diff " << diff
                                  << ", max |logit| " << scale;
  }
}

}  // namespace
}  // namespace dtrain::test
