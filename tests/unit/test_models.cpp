// Models gpt, resnet18, resnet50: parameter counts from formulas and torchvision's published
// numbers, output shapes, GPT's causality, the factories' checks against the data, channels-last
// equivalence, and logits equal to a plain-PyTorch implementation run in DTRAIN_REF_PYTHON on the
// same weights. Also the synthetic image and token data those models train on.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
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
#include "test_support.h"

namespace dtrain::detail {
void register_gpt_models();     // models/gpt.cpp
void register_resnet_models();  // models/resnet.cpp
}  // namespace dtrain::detail

namespace {

// Registering again only replaces the entries, so this is safe whether or not the built-in
// registration already includes these models.
void ensure_registered() {
  static const bool done = [] {
    dtrain::detail::register_gpt_models();
    dtrain::detail::register_resnet_models();
    return true;
  }();
  (void)done;
}

std::shared_ptr<dtrain::Model> build(const std::string& name, const dtrain::ModelConfig& cfg,
                                     const dtrain::DataSpec& spec) {
  ensure_registered();
  return dtrain::make_model(name, cfg, spec);
}

using dtrain::test::message_of;
using dtrain::test::python_failure;
using dtrain::test::run_python;
using dtrain::test::TempDir;

int64_t count_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

dtrain::DataSpec token_spec(int64_t seq, int64_t vocab) {
  dtrain::DataSpec s;
  s.input_shape = {seq};
  s.num_classes = vocab;
  s.input_dtype = at::kLong;
  return s;
}

dtrain::DataSpec image_spec(std::vector<int64_t> shape, int64_t classes) {
  dtrain::DataSpec s;
  s.input_shape = std::move(shape);
  s.num_classes = classes;
  return s;
}

dtrain::ModelConfig gpt_config(int64_t layers, int64_t heads, int64_t embd, int64_t vocab,
                               int64_t seq) {
  dtrain::ModelConfig c;
  c.name = "gpt";
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = embd;
  c.vocab_size = vocab;
  c.seq_len = seq;
  return c;
}

// GPT-2 with a tied head: wte V*C + wpe T*C + per block (2 LayerNorms 4C, qkv C*3C + 3C,
// attention projection C*C + C, fc C*4C + 4C, MLP projection 4C*C + C) + final LayerNorm 2C.
int64_t gpt_expected_parameters(int64_t layers, int64_t embd, int64_t vocab, int64_t seq) {
  const int64_t c = embd;
  const int64_t block = 4 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) +
                        (4 * c * c + c);
  return vocab * c + seq * c + layers * block + 2 * c;
}

// ---- GPT ------------------------------------------------------------------------------------

TEST(Gpt, DefaultsHaveGpt2SmallParameterCount) {
  const dtrain::ModelConfig c;  // 12 layers, 12 heads, 768, vocab 50304, 1024 positions
  auto m = build("gpt", c, token_spec(1024, 50304));
  EXPECT_EQ(gpt_expected_parameters(12, 768, 50304, 1024), 124475904);
  EXPECT_EQ(count_parameters(*m), 124475904);
}

TEST(Gpt, ParameterCountMatchesFormula) {
  struct Case {
    int64_t layers, heads, embd, vocab, seq;
  };
  for (const Case k : {Case{2, 2, 16, 32, 8}, Case{3, 4, 32, 100, 20}, Case{1, 1, 8, 5, 3}}) {
    auto m = build("gpt", gpt_config(k.layers, k.heads, k.embd, k.vocab, k.seq),
                   token_spec(k.seq, k.vocab));
    EXPECT_EQ(count_parameters(*m), gpt_expected_parameters(k.layers, k.embd, k.vocab, k.seq))
        << k.layers << " layers, " << k.embd << " wide";
  }
}

TEST(Gpt, ParameterNamesFollowNanoGpt) {
  auto m = build("gpt", gpt_config(2, 2, 16, 32, 8), token_spec(8, 32));
  std::vector<std::string> names;
  for (const auto& kv : m->named_parameters()) names.push_back(kv.key());
  const std::vector<std::string> expected_prefix = {
      "wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
      "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
      "h.0.attn.c_proj.bias", "h.0.ln_2.weight", "h.0.ln_2.bias", "h.0.mlp.c_fc.weight",
      "h.0.mlp.c_fc.bias", "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"};
  ASSERT_GE(names.size(), expected_prefix.size());
  for (size_t i = 0; i < expected_prefix.size(); ++i) EXPECT_EQ(names[i], expected_prefix[i]);
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_EQ(names.size(), 2u + 2u * 12u + 2u);  // no separate lm_head weight: it is tied to wte
}

TEST(Gpt, InitializationIsGpt2s) {
  const int64_t layers = 4;
  auto m = build("gpt", gpt_config(layers, 4, 128, 512, 64), token_spec(64, 512));
  const auto params = m->named_parameters();
  auto std_of = [&](const std::string& n) { return params[n].std().item<double>(); };
  EXPECT_NEAR(std_of("wte.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("wpe.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("h.1.attn.c_attn.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("h.1.mlp.c_fc.weight"), 0.02, 0.002);
  const double proj = 0.02 / std::sqrt(2.0 * layers);
  EXPECT_NEAR(std_of("h.1.attn.c_proj.weight"), proj, proj * 0.1);
  EXPECT_NEAR(std_of("h.1.mlp.c_proj.weight"), proj, proj * 0.1);
  for (const auto& kv : params) {
    if (kv.key().find("ln_") != std::string::npos) {
      const bool weight = kv.key().size() > 6 && kv.key().substr(kv.key().size() - 6) == "weight";
      EXPECT_TRUE(kv.value().equal(weight ? at::ones_like(kv.value()) : at::zeros_like(kv.value())))
          << kv.key();
    } else if (kv.key().size() > 4 && kv.key().substr(kv.key().size() - 4) == "bias") {
      EXPECT_EQ(kv.value().abs().max().item<float>(), 0.0f) << kv.key();
    }
  }
}

TEST(Gpt, ForwardShapeAndSequenceLimit) {
  auto m = build("gpt", gpt_config(2, 2, 16, 32, 8), token_spec(8, 32));
  const at::Tensor x = at::randint(0, 32, {3, 5}, at::kLong);  // (B, T) shorter than seq_len
  const at::Tensor y = m->forward(x);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 5, 32}));
  EXPECT_EQ(y.scalar_type(), at::kFloat);
  EXPECT_EQ(m->forward(at::randint(0, 32, {2, 8}, at::kLong)).sizes(),
            (std::vector<int64_t>{2, 8, 32}));
  const std::string msg = message_of([&] { m->forward(at::randint(0, 32, {2, 9}, at::kLong)); });
  EXPECT_NE(msg.find("model.seq_len"), std::string::npos) << msg;
  const std::string flt = message_of([&] { m->forward(at::randn({2, 4})); });
  EXPECT_NE(flt.find("token ids"), std::string::npos) << flt;
}

TEST(Gpt, FactoryChecksTheData) {
  auto c = gpt_config(2, 2, 16, 32, 8);
  std::string msg = message_of([&] { build("gpt", c, token_spec(8, 50)); });
  EXPECT_NE(msg.find("model.vocab_size"), std::string::npos) << msg;
  msg = message_of([&] { build("gpt", c, token_spec(16, 32)); });
  EXPECT_NE(msg.find("model.seq_len"), std::string::npos) << msg;
  msg = message_of([&] { build("gpt", c, image_spec({1, 28, 28}, 10)); });
  EXPECT_NE(msg.find("token"), std::string::npos) << msg;
  auto odd = gpt_config(2, 3, 16, 32, 8);
  msg = message_of([&] { build("gpt", odd, token_spec(8, 32)); });
  EXPECT_NE(msg.find("model.n_head"), std::string::npos) << msg;
}

TEST(Gpt, IsCausal) {
  at::manual_seed(1);
  auto m = build("gpt", gpt_config(2, 2, 16, 32, 8), token_spec(8, 32));
  m->eval();
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randint(0, 32, {2, 8}, at::kLong);
  const at::Tensor base = m->forward(x);  // (B, T, V)
  for (int64_t t = 0; t + 1 < 8; ++t) {
    at::Tensor x2 = x.clone();
    x2.select(1, t + 1).add_(1).remainder_(32);  // change token t+1 in every sequence
    const at::Tensor y = m->forward(x2);
    EXPECT_TRUE(at::allclose(y.narrow(1, 0, t + 1), base.narrow(1, 0, t + 1), 0, 1e-6))
        << "logits at positions <= " << t << " changed when token " << t + 1 << " changed";
    EXPECT_GT((y.select(1, t + 1) - base.select(1, t + 1)).abs().max().item<float>(), 1e-4)
        << "logits at " << t + 1 << " ignore their own token";
  }
}

TEST(Gpt, DropoutOnlyInTraining) {
  auto c = gpt_config(2, 2, 16, 32, 8);
  c.dropout = 0.5;
  auto m = build("gpt", c, token_spec(8, 32));
  const at::Tensor x = at::randint(0, 32, {2, 8}, at::kLong);
  m->eval();
  EXPECT_TRUE(m->forward(x).equal(m->forward(x)));
  m->train();
  EXPECT_FALSE(m->forward(x).equal(m->forward(x)));
}

TEST(Gpt, InitialLossIsLogVocabAndGradientsFlow) {
  auto m = build("gpt", gpt_config(2, 2, 16, 64, 8), token_spec(8, 64));
  const at::Tensor x = at::randint(0, 64, {4, 8}, at::kLong);
  const at::Tensor y = at::randint(0, 64, {4, 8}, at::kLong);
  const at::Tensor logits = m->forward(x);  // (B, T, V)
  const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 64}), y.reshape({-1}));
  EXPECT_NEAR(loss.item<double>(), std::log(64.0), 0.05);
  loss.backward();
  for (const auto& kv : m->named_parameters()) {
    ASSERT_TRUE(kv.value().grad().defined()) << kv.key();
    EXPECT_TRUE(kv.value().grad().isfinite().all().item<bool>()) << kv.key();
  }
}

// ---- ResNet ---------------------------------------------------------------------------------

TEST(ResNet, ParameterCountsMatchTorchvision) {
  dtrain::ModelConfig c;
  auto r18 = build("resnet18", c, image_spec({3, 224, 224}, 1000));
  auto r50 = build("resnet50", c, image_spec({3, 224, 224}, 1000));
  EXPECT_EQ(count_parameters(*r18), 11689512);
  EXPECT_EQ(count_parameters(*r50), 25557032);
  const auto names = r50->named_parameters();
  for (const char* n : {"conv1.weight", "bn1.weight", "layer1.0.conv3.weight",
                        "layer1.0.downsample.0.weight", "layer1.0.downsample.1.bias",
                        "layer4.2.bn3.weight", "fc.weight", "fc.bias"}) {
    EXPECT_NE(names.find(n), nullptr) << n;
  }
  // v1.5: the stride of a stage's first Bottleneck is on the 3x3 conv.
  EXPECT_EQ(names["layer2.0.conv2.weight"].sizes(), (std::vector<int64_t>{128, 128, 3, 3}));
  EXPECT_EQ(r50->named_buffers().size(), 53u * 3u);  // running mean, var, batches per BN
}

TEST(ResNet, ForwardShapes) {
  dtrain::ModelConfig c;
  auto r18 = build("resnet18", c, image_spec({1, 28, 28}, 10));  // MNIST-like, one channel
  EXPECT_EQ(count_parameters(*r18), 11689512 - 2 * 64 * 7 * 7 - (512 * 1000 + 1000) +
                                        (512 * 10 + 10));
  EXPECT_EQ(r18->forward(at::randn({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  auto r50 = build("resnet50", c, image_spec({3, 64, 64}, 7));
  EXPECT_EQ(r50->forward(at::randn({2, 3, 64, 64})).sizes(), (std::vector<int64_t>{2, 7}));
  std::string msg = message_of([&] { build("resnet18", c, token_spec(8, 32)); });
  EXPECT_NE(msg.find("model.name"), std::string::npos) << msg;
}

TEST(ResNet, InitializationIsTorchvisions) {
  dtrain::ModelConfig c;
  auto m = build("resnet50", c, image_spec({3, 224, 224}, 1000));
  const auto p = m->named_parameters();
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * kh * kw)).
  const at::Tensor w = p["layer3.0.conv2.weight"];  // (256, 256, 3, 3)
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (256 * 9)), 0.003);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.002);
  EXPECT_TRUE(p["layer3.0.bn2.weight"].equal(at::ones({256})));
  EXPECT_TRUE(p["layer3.0.bn2.bias"].equal(at::zeros({256})));
}

TEST(ResNet, ChannelsLastComputesTheSame) {
  dtrain::ModelConfig c;
  at::manual_seed(3);
  auto plain = build("resnet18", c, image_spec({3, 32, 32}, 10));
  c.channels_last = true;
  auto cl = build("resnet18", c, image_spec({3, 32, 32}, 10));
  {
    at::NoGradGuard no_grad;
    auto src = plain->named_parameters();
    for (auto& kv : cl->named_parameters()) {
      if (kv.value().dim() == 4) {
        EXPECT_TRUE(kv.value().is_contiguous(at::MemoryFormat::ChannelsLast)) << kv.key();
        if (kv.value().size(2) > 1) {
          EXPECT_FALSE(kv.value().is_contiguous()) << kv.key();
        }
      }
      kv.value().copy_(src[kv.key()]);
    }
  }
  // Eval mode: with batch statistics over few values per channel (layer4 is 1x1 here), BN
  // amplifies rounding differences between the two layouts.
  plain->eval();
  cl->eval();
  const at::Tensor x = at::randn({2, 3, 32, 32});
  const at::Tensor a = plain->forward(x);
  const at::Tensor b = cl->forward(x);
  EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-4)) << (a - b).abs().max().item<float>();
  cl->train();
  cl->forward(x).sum().backward();
  for (auto& kv : cl->named_parameters()) ASSERT_TRUE(kv.value().grad().defined()) << kv.key();
}

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

TEST(SyntheticTokens, TrainAGptStep) {
  dtrain::DataConfig tokens;
  tokens.format = dtrain::DataFormat::kSynthetic;
  tokens.synthetic_task = dtrain::SyntheticTask::kTokens;
  tokens.synthetic_shape = {8};
  tokens.synthetic_classes = 32;
  tokens.synthetic_size = 16;
  tokens.synthetic_test_size = 0;
  const auto data = dtrain::make_datasets(tokens, 0);
  auto m = build("gpt", gpt_config(1, 2, 16, 32, 8), data.train->spec());
  const dtrain::Batch b = data.train->get({0, 1, 2, 3});
  const at::Tensor logits = m->forward(b.inputs);  // (4, 8, 32)
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 8, 32}));
  const at::Tensor loss =
      at::cross_entropy_loss(logits.reshape({-1, 32}), b.targets.reshape({-1}));
  EXPECT_NEAR(loss.item<double>(), std::log(32.0), 0.05);
}

}  // namespace
