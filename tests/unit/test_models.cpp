// Models gpt, resnet18, resnet50: parameter counts from formulas and torchvision's published
// numbers, output shapes, GPT's causality, the factories' checks against the data, channels-last
// equivalence; the synthetic token data GPT trains on. (Logits against plain PyTorch:
// test_models_pytorch.cpp.)
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
  const std::vector<std::string> expected_prefix = {"wte.weight",
                                                    "wpe.weight",
                                                    "h.0.ln_1.weight",
                                                    "h.0.ln_1.bias",
                                                    "h.0.attn.c_attn.weight",
                                                    "h.0.attn.c_attn.bias",
                                                    "h.0.attn.c_proj.weight",
                                                    "h.0.attn.c_proj.bias",
                                                    "h.0.ln_2.weight",
                                                    "h.0.ln_2.bias",
                                                    "h.0.mlp.c_fc.weight",
                                                    "h.0.mlp.c_fc.bias",
                                                    "h.0.mlp.c_proj.weight",
                                                    "h.0.mlp.c_proj.bias"};
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
  for (const char* n :
       {"conv1.weight", "bn1.weight", "layer1.0.conv3.weight", "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.bias", "layer4.2.bn3.weight", "fc.weight", "fc.bias"}) {
    EXPECT_NE(names.find(n), nullptr) << n;
  }
  // v1.5: the stride of a stage's first Bottleneck is on the 3x3 conv.
  EXPECT_EQ(names["layer2.0.conv2.weight"].sizes(), (std::vector<int64_t>{128, 128, 3, 3}));
  EXPECT_EQ(r50->named_buffers().size(), 53u * 3u);  // running mean, var, batches per BN
}

TEST(ResNet, ForwardShapes) {
  dtrain::ModelConfig c;
  auto r18 = build("resnet18", c, image_spec({1, 28, 28}, 10));  // MNIST-like, one channel
  EXPECT_EQ(count_parameters(*r18),
            11689512 - 2 * 64 * 7 * 7 - (512 * 1000 + 1000) + (512 * 10 + 10));
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
  const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 32}), b.targets.reshape({-1}));
  EXPECT_NEAR(loss.item<double>(), std::log(32.0), 0.05);
}

}  // namespace
}  // namespace dtrain::test
